#ifndef PHOTOVAULT_CLINUX_SHIM_H
#define PHOTOVAULT_CLINUX_SHIM_H
/* Linux system calls and flags that Glibc's Swift module does not expose (they need
   _GNU_SOURCE, are variadic, or are macros). No library to link. _GNU_SOURCE itself is
   not defined here: it would change struct layouts against Swift's Glibc module. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <spawn.h>
#include <syslog.h>
#include <sys/xattr.h>
#include <sys/vfs.h>
#include <sched.h>
#include <malloc.h>

#include <dirent.h>
#include <stddef.h>
#include <string.h>

/* A readdir record's name and its length, read within the record (d_reclen). glibc's records
   are only as long as their name: Swift's `ent.pointee.d_name` copies the declared 256 bytes,
   past a short record's end and, at the end of glibc's buffer, past the mapping. */
static inline const char *pv_dirent_name(const struct dirent *e) { return e->d_name; }
static inline size_t pv_dirent_name_length(const struct dirent *e) {
    size_t at = offsetof(struct dirent, d_name);
    return strnlen(e->d_name, e->d_reclen > at ? e->d_reclen - at : 0);
}

#define PV_RENAME_NOREPLACE 1
#define PV_RENAME_EXCHANGE 2

static inline int pv_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
static inline int pv_openat(int dirfd, const char *path, int flags, unsigned mode) { return openat(dirfd, path, flags, mode); }
static inline int pv_open(const char *path, int flags, unsigned mode) { return open(path, flags, mode); }
static inline int pv_o_path(void) { return 010000000; }               /* O_PATH */
static inline int pv_at_empty_path(void) { return 0x1000; }           /* AT_EMPTY_PATH */
static inline int pv_fcntl_getfl(int fd) { return fcntl(fd, F_GETFL); }
static inline int pv_fcntl_dupfd_cloexec(int fd, int min) { return fcntl(fd, F_DUPFD_CLOEXEC, min); }
static inline int pv_dup3_cloexec(int oldfd, int newfd) { return (int)syscall(SYS_dup3, oldfd, newfd, O_CLOEXEC); }
/* getdents64(2) (glibc's wrapper needs _GNU_SOURCE): lists a directory without malloc, so a
   signal handler can (readdir allocates). Records are struct linux_dirent64. */
static inline long pv_getdents64(int fd, void *buf, unsigned long size) { return syscall(SYS_getdents64, fd, buf, size); }
static inline int pv_pipe2_cloexec(int fds[2]) { return (int)syscall(SYS_pipe2, fds, O_CLOEXEC); }
static inline short pv_posix_spawn_setsid(void) { return 0x80; }      /* POSIX_SPAWN_SETSID (glibc >= 2.26) */
/* mallopt(M_ARENA_MAX, 1): every thread allocates from malloc's main arena. */
static inline int pv_malloc_single_arena(void) { return mallopt(M_ARENA_MAX, 1); }
/* SCHED_BATCH (3) for the calling thread only (Linux schedules threads, not processes);
   threads it creates later inherit it. Any user may choose it: it changes no priority. */
static inline int pv_sched_batch_self(void) { struct sched_param p = { 0 }; return sched_setscheduler(0, 3, &p); }
/* fallocate(FALLOC_FL_KEEP_SIZE): reserve blocks without changing the file's size. */
static inline int pv_reserve(int fd, long long offset, long long length) {
    return (int)syscall(SYS_fallocate, fd, 0x01, (off_t)offset, (off_t)length);
}
/* fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE): give back the blocks of a range,
   which then reads as zeros; the size stays. */
static inline int pv_punch_hole(int fd, long long offset, long long length) {
    return (int)syscall(SYS_fallocate, fd, 0x02 | 0x01, (off_t)offset, (off_t)length);
}
/* fallocate(2) with any mode (PUNCH_HOLE, ZERO_RANGE, ...): for the plain passthrough tree. */
static inline int pv_fallocate(int fd, int mode, long long offset, long long length) {
    return (int)syscall(SYS_fallocate, fd, mode, (off_t)offset, (off_t)length);
}
/* fstatfs's f_type (the filesystem's magic number), or -1 with errno set. */
static inline long long pv_fs_type(int fd) {
    struct statfs s;
    return fstatfs(fd, &s) == 0 ? (long long)s.f_type : -1;
}
/* A write lock on one byte, held by the open file description (F_OFD_SETLKW, 38; the
   macro needs _GNU_SOURCE), waiting for it: bytes of one lock file stand for separate
   resources, and two descriptions exclude each other also within one process. */
static inline int pv_ofd_lock_byte(int fd, long long offset) {
    struct flock l;
    l.l_type = F_WRLCK; l.l_whence = SEEK_SET; l.l_start = (off_t)offset; l.l_len = 1; l.l_pid = 0;
    return fcntl(fd, 38, &l);
}
/* syslog is variadic: log one preformatted string. */
static inline void pv_syslog(int priority, const char *msg) { syslog(priority, "%s", msg); }
/* memmem is a GNU extension (hidden without _GNU_SOURCE); the tests search process memory with it. */
extern void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen);
static inline int pv_contains(const void *hay, size_t hayLen, const void *needle, size_t needleLen) {
    return memmem(hay, hayLen, needle, needleLen) != NULL;
}

#endif
