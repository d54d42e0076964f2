#ifndef PHOTOVAULT_CSODIUM_SHIM_H
#define PHOTOVAULT_CSODIUM_SHIM_H
#include <sodium.h>
#include <sys/prctl.h>
#include <sys/resource.h>

/* prctl is variadic and not imported by Swift. */
static inline int pv_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
static inline int pv_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
#endif
