#ifndef PHOTOVAULT_CSYSTEMD_SHIM_H
#define PHOTOVAULT_CSYSTEMD_SHIM_H
#include <systemd/sd-bus.h>
#include <systemd/sd-login.h>
#include <systemd/sd-daemon.h>
#endif
