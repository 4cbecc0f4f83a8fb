#include "fault.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Where format_text writes: truncates, always leaves room for the NUL. */
struct sink {
    char *out;
    size_t size;
    size_t len;
};

static void put(struct sink *s, const char *bytes, size_t count) {
    for (size_t i = 0; i < count && s->len + 1 < s->size; i++) {
        s->out[s->len++] = bytes[i];
    }
}

static void put_u64(struct sink *s, uint64_t value) {
    char digits[20];
    size_t n = sizeof digits;
    do {
        digits[--n] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0);
    put(s, &digits[n], sizeof digits - n);
}

static void vformat_text(char *out, size_t size, const char *format, va_list args) {
    struct sink s = {out, size, 0};
    for (const char *p = format; *p != '\0'; p++) {
        if (*p != '%') {
            put(&s, p, 1);
        } else if (strncmp(p, "%%", 2) == 0) {
            put(&s, "%", 1);
            p += 1;
        } else if (strncmp(p, "%s", 2) == 0) {
            const char *text = va_arg(args, const char *);
            put(&s, text, strlen(text));
            p += 1;
        } else if (strncmp(p, "%.*s", 4) == 0) {
            int count = va_arg(args, int);
            const char *text = va_arg(args, const char *);
            put(&s, text, count > 0 ? (size_t)count : 0);
            p += 3;
        } else if (strncmp(p, "%u", 2) == 0) {
            put_u64(&s, va_arg(args, unsigned));
            p += 1;
        } else if (strncmp(p, "%lu", 3) == 0) {
            put_u64(&s, va_arg(args, unsigned long));
            p += 2;
        } else if (strncmp(p, "%llu", 4) == 0) {
            put_u64(&s, va_arg(args, unsigned long long));
            p += 3;
        } else {
            /* Not in the subset: shown as written, so a test sees it. */
            put(&s, p, 1);
        }
    }
    if (size > 0) {
        out[s.len] = '\0';
    }
}

void format_text(char *out, size_t size, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vformat_text(out, size, format, args);
    va_end(args);
}

bool fail(struct fault *f, enum fault_kind kind, uint64_t value, const char *format, ...) {
    if (f != NULL) {
        f->kind = kind;
        f->value = value;
        va_list args;
        va_start(args, format);
        vformat_text(f->message, sizeof f->message, format, args);
        va_end(args);
    }
    return false;
}

void fault_describe(const struct fault *f, char *out, size_t size) {
    switch (f->kind) {
    case FAULT_OUT_OF_MEMORY:
        format_text(out, size, "out of memory for %" PRIu64 " bytes", f->value);
        break;
    case FAULT_UNKNOWN_HANDLE:
        format_text(out, size, "unknown handle %" PRIu64, f->value);
        break;
    default:
        format_text(out, size, "%s", f->message);
        break;
    }
}

bool reserve(void *items_ptr, size_t *capacity, size_t needed, size_t item_size) {
    if (needed <= *capacity) {
        return true;
    }
    /* Doubling keeps appends amortised O(1); 16 spares a device warming up a
     * string of tiny reallocations. */
    size_t grown = *capacity < 8 ? 16 : *capacity * 2;
    if (grown < needed) {
        grown = needed;
    }
    if (grown > SIZE_MAX / item_size) {
        return false;
    }
    /* The caller's pointer is read and written through memcpy: it may be a
     * pointer to any object type. */
    void *items;
    memcpy(&items, items_ptr, sizeof items);
    void *moved = realloc(items, grown * item_size);
    if (moved == NULL) {
        return false;
    }
    memcpy(items_ptr, &moved, sizeof moved);
    *capacity = grown;
    return true;
}
