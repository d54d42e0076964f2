#ifndef PHOTOVAULT_CSODIUM_SHIM_H
#define PHOTOVAULT_CSODIUM_SHIM_H
#include <sodium.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <errno.h>

/* prctl is variadic and not imported by Swift. */
static inline int pv_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
static inline int pv_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
/* Locks every page of the process, present and future, as it is first touched (MCL_ONFAULT:
   no prefaulting of reserved stacks and arenas). Returns 0 or errno. */
static inline int pv_lock_all_memory(void) {
    return mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == 0 ? 0 : errno;
}
#endif
