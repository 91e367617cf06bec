#ifndef CHAUL_SYSTEM_H
#define CHAUL_SYSTEM_H

// The few Linux calls the Swift Glibc module does not expose: extended attributes (the
// owner mark of part files, a finished file's origin URL), rename without replacing (placing a
// finished file), and starting a program (hooks, the daemon) with posix_spawn; and one SQLite
// setting only a variadic C function sets.

#include <stddef.h>
#include <sys/types.h>

#include "CHaulXML.h"

/// fsetxattr(2); -1 with errno ENOTSUP where the platform has no extended attributes.
int chaul_fsetxattr(int fd, const char *name, const void *value, size_t size);
/// fgetxattr(2).
ssize_t chaul_fgetxattr(int fd, const char *name, void *value, size_t size);
/// fremovexattr(2).
int chaul_fremovexattr(int fd, const char *name);
/// rename(2) that fails with EEXIST instead of replacing `to`; falls back to link(2) and
/// unlink(2) where renameat2 is unsupported (EINVAL/ENOSYS).
int chaul_rename_noreplace(const char *from, const char *to);

/// A NETLINK_ROUTE socket (close-on-exec) subscribed to link, IPv4/IPv6 address and route
/// changes; -1 with errno where there is no rtnetlink.
int chaul_rtnetlink_open(void);
/// The kernel's interface flags (IFF_UP, IFF_RUNNING, …) of `name`, or -1 with errno.
int chaul_interface_flags(const char *name);

/// Starts `path` with posix_spawn(3): `in`, `out` and `err` become its 0, 1 and 2 (-1 keeps
/// this process's own); every other descriptor is closed in the child (closefrom, so nothing
/// leaks into it, without reading /proc/self/fd); signal dispositions are reset to their
/// defaults and the mask emptied; it runs in `directory` when not NULL, in a session of its
/// own when `new_session` is non-zero, else in a process group of its own. Returns 0 and sets
/// `*pid`, or an errno value.
int chaul_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                const char *directory, int in, int out, int err, int new_session);

/// Starts writing `length` bytes at `offset` of `fd` back to disk without waiting for them
/// (sync_file_range(2) with SYNC_FILE_RANGE_WRITE); 0, or -1 with errno where unsupported.
/// Makes nothing durable by itself: a later fdatasync(2) does, with less left to write.
int chaul_start_writeback(int fd, off_t offset, off_t length);

/// The type of the file system `fd` is on (fstatfs(2)'s f_type, such as 0xEF53 for ext4), or
/// 0 where it cannot be read.
unsigned long chaul_file_system_type(int fd);

/// Keeps up to `bytes` of freed memory at the top of each of glibc's heaps instead of giving
/// it back to the system at once (M_TRIM_THRESHOLD; nothing where the C library is not glibc).
void chaul_retain_freed_memory(size_t bytes);

/// Makes glibc create at most `arenas` allocator arenas (M_ARENA_MAX; nothing elsewhere).
void chaul_limit_arenas(int arenas);

/// Gives the free pages of every glibc arena back to the system (malloc_trim(0)); nothing
/// where the C library is not glibc.
void chaul_return_freed_memory(void);

struct sqlite3;
/// Makes the last connection to a database leave its write-ahead log at close instead of
/// checkpointing it into the database and removing it (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE);
/// SQLite's result code (sqlite3_db_config is variadic: Swift cannot call it).
int chaul_sqlite_keep_wal_at_close(struct sqlite3 *db);

#endif
