#define _GNU_SOURCE
#include "CHaulSystem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#if defined(__linux__)
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
