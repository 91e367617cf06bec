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
