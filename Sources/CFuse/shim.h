#ifndef PHOTOVAULT_CFUSE_SHIM_H
#define PHOTOVAULT_CFUSE_SHIM_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <linux/fs.h>

/* Variadic or macro helpers that Swift cannot import directly. */
static inline int pv_open3(const char *path, int flags, unsigned mode) { return open(path, flags, mode); }
static inline int pv_openat3(int dirfd, const char *path, int flags, unsigned mode) { return openat(dirfd, path, flags, mode); }
static inline int pv_fcntl_setfl(int fd, int flags) { return fcntl(fd, F_SETFL, flags); }
#endif
