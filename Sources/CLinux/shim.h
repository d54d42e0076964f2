#ifndef PHOTOVAULT_CLINUX_SHIM_H
#define PHOTOVAULT_CLINUX_SHIM_H
/* Linux system calls and flags that Glibc's Swift module does not expose (they need
   _GNU_SOURCE, are variadic, or are macros). No library to link. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <syslog.h>

/* syslog is variadic: log one preformatted string. */
static inline void pv_syslog(int priority, const char *msg) { syslog(priority, "%s", msg); }

#define PV_RENAME_NOREPLACE 1
#define PV_RENAME_EXCHANGE 2

static inline int pv_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
static inline int pv_openat(int dirfd, const char *path, int flags, unsigned mode) { return openat(dirfd, path, flags, mode); }
static inline int pv_open(const char *path, int flags, unsigned mode) { return open(path, flags, mode); }
static inline int pv_o_path(void) { return O_PATH; }
static inline int pv_o_tmpfile(void) { return O_TMPFILE; }
static inline int pv_at_empty_path(void) { return AT_EMPTY_PATH; }
static inline int pv_set_not_dumpable_linux(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
static inline int pv_fcntl_getfl(int fd) { return fcntl(fd, F_GETFL); }
static inline int pv_fcntl_dupfd_cloexec(int fd, int min) { return fcntl(fd, F_DUPFD_CLOEXEC, min); }
#endif
