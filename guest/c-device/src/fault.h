/* Why a request was refused: the guest's side of WIT's `device-error`.
 *
 * The pure modules (allocator, ordering, settings) know nothing of the
 * generated bindings; they report failures as a `struct fault`, which
 * device.c turns into the WIT variant. Messages live in a fixed buffer so
 * that reporting a failure never needs the heap (which may be what failed).
 */
#ifndef TFWASM_C_DEVICE_FAULT_H
#define TFWASM_C_DEVICE_FAULT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fault_kind {
    FAULT_NONE = 0,
    /* `value`: the size that did not fit. */
    FAULT_OUT_OF_MEMORY,
    /* `value`: the handle or offset nobody handed out. */
    FAULT_UNKNOWN_HANDLE,
    /* `message` says what is malformed. */
    FAULT_INVALID_ARGUMENT,
    /* `message` says what broke inside the guest (its own heap, mostly). */
    FAULT_INTERNAL,
};

/* Long enough for the longest message with three 20-digit numbers. */
#define FAULT_MESSAGE_MAX 192

struct fault {
    enum fault_kind kind;
    uint64_t value;
    char message[FAULT_MESSAGE_MAX];
};

/* Fills `f` (when not NULL) and returns false, so a refusal reads
 * `return fail(f, FAULT_..., value, "fmt", ...);`. */
__attribute__((format(printf, 4, 5))) bool fail(struct fault *f, enum fault_kind kind, uint64_t value,
                                                 const char *format, ...);

/* A subset of snprintf, enough for messages: `%s`, `%.*s` (exactly that
 * many bytes: WIT strings are not NUL-terminated), `%u`, `%lu`, `%llu` (so
 * PRIu32 and PRIu64 work) and `%%`. libc's printf family would link stdio,
 * and with it WASI imports (fd_write, fd_seek, fd_close), into a component
 * that must import nothing but the host interface. */
__attribute__((format(printf, 3, 4))) void format_text(char *out, size_t size, const char *format, ...);

/* The fault as one sentence, for the log and for `stream-status`. */
void fault_describe(const struct fault *f, char *out, size_t size);

/* Grows the array `*items_ptr` (a pointer to the array's pointer; items of
 * `item_size` bytes, `*capacity` of them allocated) to hold at least
 * `needed` items. False, with the array untouched, when the guest's heap is
 * exhausted. */
bool reserve(void *items_ptr, size_t *capacity, size_t needed, size_t item_size);

#endif
