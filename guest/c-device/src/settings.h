/* The device's policy options (`[guest.config]`), parsed and checked: the
 * same keys as the reference guest's.
 *
 * Plain C, no WIT types: tests/unit.c tests it natively.
 */
#ifndef TFWASM_C_DEVICE_SETTINGS_H
#define TFWASM_C_DEVICE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fault.h"

/* A string that is not NUL-terminated (WIT strings are not). */
struct str {
    const char *ptr;
    size_t len;
};

struct option {
    struct str key;
    struct str value;
};

/* What the device reports about itself and how much memory it hands out.
 * The strings point into the defaults or into the options parsed. */
struct settings {
    struct str hardware_name;
    struct str vendor;
    /* Bytes per second, for TensorFlow's cost model. */
    uint64_t memory_bandwidth;
    double gflops;
    /* Bytes the allocator hands out, at most the region's size. */
    uint64_t memory_limit;
};

#define DEFAULT_HARDWARE_NAME "tfwasm C device"

struct settings settings_defaults(uint64_t memory_size);

/* Called with each warning (an unknown option, a limit larger than the
 * region), a NUL-terminated sentence. */
typedef void (*warn_fn)(void *context, const char *warning);

/* Applies `options` over the defaults. A malformed value is refused with a
 * message naming the option; an unknown option only earns a warning, so a
 * policy written for a newer guest still loads. */
bool settings_parse(uint64_t memory_size, const struct option *options, size_t count, struct settings *out,
                    warn_fn warn, void *context, struct fault *f);

#endif
