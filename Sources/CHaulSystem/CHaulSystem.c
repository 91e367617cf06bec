#define _GNU_SOURCE
#include "CHaulSystem.h"

#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <unistd.h>

#include <sqlite3.h>

#if defined(__linux__)
#include <sys/vfs.h>
#include <sys/xattr.h>
#endif

int chaul_fsetxattr(int fd, const char *name, const void *value, size_t size) {
#if defined(__linux__)
    return fsetxattr(fd, name, value, size, 0);
#else
    errno = ENOTSUP;
    return -1;
#endif
}

ssize_t chaul_fgetxattr(int fd, const char *name, void *value, size_t size) {
#if defined(__linux__)
    return fgetxattr(fd, name, value, size);
#else
    errno = ENOTSUP;
    return -1;
#endif
}

int chaul_fremovexattr(int fd, const char *name) {
#if defined(__linux__)
    return fremovexattr(fd, name);
#else
    errno = ENOTSUP;
    return -1;
#endif
}

int chaul_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(RENAME_NOREPLACE)
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
    // link(2) never replaces; the part file then loses its old name.
    if (link(from, to) != 0) return -1;
    unlink(from);
    return 0;
}

#if defined(__linux__)
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>

int chaul_rtnetlink_open(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address;
    memset(&address, 0, sizeof(address));
    address.nl_family = AF_NETLINK;
    address.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int chaul_interface_flags(const char *name) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ifreq request;
    memset(&request, 0, sizeof(request));
    strncpy(request.ifr_name, name, IFNAMSIZ - 1);
    int result = ioctl(fd, SIOCGIFFLAGS, &request);
    int saved = errno;
    close(fd);
    if (result != 0) {
        errno = saved;
        return -1;
    }
    return request.ifr_flags & 0xffff;
}
#else
#include <errno.h>
int chaul_rtnetlink_open(void) { errno = ENOSYS; return -1; }
int chaul_interface_flags(const char *name) { (void)name; errno = ENOSYS; return -1; }
#endif

int chaul_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                const char *directory, int in, int out, int err, int new_session) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    int sources[3] = {in, out, err};
    for (int target = 0; target < 3 && result == 0; target++) {
        if (sources[target] >= 0) result = posix_spawn_file_actions_adddup2(&actions, sources[target], target);
    }
    if (result == 0 && directory != NULL) result = posix_spawn_file_actions_addchdir_np(&actions, directory);
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &empty);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    flags |= new_session ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP;
    if (result == 0) result = posix_spawnattr_setflags(&attributes, flags);
    if (result == 0 && !new_session) result = posix_spawnattr_setpgroup(&attributes, 0);
    if (result == 0) result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}

void chaul_retain_freed_memory(size_t bytes) {
#if defined(__GLIBC__)
    mallopt(M_TRIM_THRESHOLD, (int)(bytes > 0x7fffffff ? 0x7fffffff : bytes));
#else
    (void)bytes;
#endif
}

void chaul_limit_arenas(int arenas) {
#if defined(__GLIBC__)
    mallopt(M_ARENA_MAX, arenas);
#else
    (void)arenas;
#endif
}

void chaul_return_freed_memory(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

unsigned long chaul_file_system_type(int fd) {
#if defined(__linux__)
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return 0;
    return (unsigned long)info.f_type;
#else
    (void)fd;
    return 0;
#endif
}

int chaul_start_writeback(int fd, off_t offset, off_t length) {
#if defined(__linux__)
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd; (void)offset; (void)length;
    errno = ENOSYS;
    return -1;
#endif
}

int chaul_sqlite_keep_wal_at_close(struct sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}
