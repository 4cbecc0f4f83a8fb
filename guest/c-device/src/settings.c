#include "settings.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

struct settings settings_defaults(uint64_t memory_size) {
    return (struct settings){
        .hardware_name = {DEFAULT_HARDWARE_NAME, sizeof DEFAULT_HARDWARE_NAME - 1},
        .vendor = {"tfwasm", sizeof "tfwasm" - 1},
        /* Compute runs on the host's CPU cores: a DDR4 channel and a few
         * cores' worth of FLOPs. Only TensorFlow's cost model reads these. */
        .memory_bandwidth = UINT64_C(20000000000),
        .gflops = 100.0,
        .memory_limit = memory_size,
    };
}

static bool is(struct str s, const char *name) {
    return s.len == strlen(name) && memcmp(s.ptr, name, s.len) == 0;
}

static bool is_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static struct str trim(struct str s) {
    while (s.len > 0 && is_space(s.ptr[0])) {
        s.ptr++;
        s.len--;
    }
    while (s.len > 0 && is_space(s.ptr[s.len - 1])) {
        s.len--;
    }
    return s;
}

/* Decimal digits with an optional leading '+', surrounding space allowed. */
static bool parse_u64(struct str s, uint64_t *out) {
    s = trim(s);
    size_t i = s.len > 0 && s.ptr[0] == '+' ? 1 : 0;
    if (i == s.len) {
        return false;
    }
    uint64_t n = 0;
    for (; i < s.len; i++) {
        if (!is_digit(s.ptr[i])) {
            return false;
        }
        uint64_t digit = (uint64_t)(s.ptr[i] - '0');
        if (n > (UINT64_MAX - digit) / 10) {
            return false;
        }
        n = n * 10 + digit;
    }
    *out = n;
    return true;
}

/* A decimal number (`2.5`, `+40`, `1e3`, `.5`), surrounding space allowed.
 * No libc strtod: wasm32's long double would pull in soft-float helpers.
 * Up to 19 significant digits are kept; with at most 15 of them and a power
 * of ten up to 1e22 the result is correctly rounded (both are exact doubles
 * and one multiplication or division rounds once), which covers any figure a
 * policy gives. Beyond that it is within a few units in the last place. */
static bool parse_number(struct str s, double *out) {
    static const double exact_powers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                          1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    s = trim(s);
    size_t i = s.len > 0 && s.ptr[0] == '+' ? 1 : 0;
    uint64_t mantissa = 0;
    int significant = 0, digits = 0;
    long exponent = 0;
    bool point = false;
    for (; i < s.len && (is_digit(s.ptr[i]) || (s.ptr[i] == '.' && !point)); i++) {
        if (s.ptr[i] == '.') {
            point = true;
            continue;
        }
        digits++;
        if (significant < 19) {
            mantissa = mantissa * 10 + (uint64_t)(s.ptr[i] - '0');
            significant += mantissa > 0;
            exponent -= point;
        } else {
            exponent += !point;
        }
    }
    if (digits == 0) {
        return false;
    }
    if (i < s.len && (s.ptr[i] == 'e' || s.ptr[i] == 'E')) {
        i++;
        bool negative = i < s.len && s.ptr[i] == '-';
        i += i < s.len && (s.ptr[i] == '-' || s.ptr[i] == '+');
        if (i == s.len) {
            return false;
        }
        long e = 0;
        for (; i < s.len && is_digit(s.ptr[i]); i++) {
            e = e < 100000 ? e * 10 + (s.ptr[i] - '0') : e;
        }
        exponent += negative ? -e : e;
    }
    if (i != s.len) {
        return false;
    }
    double value = (double)mantissa;
    for (; exponent > 22; exponent -= 22) {
        value *= 1e22;
    }
    for (; exponent < -22; exponent += 22) {
        value /= 1e22;
    }
    *out = exponent >= 0 ? value * exact_powers[exponent] : value / exact_powers[-exponent];
    return true;
}

bool settings_parse(uint64_t memory_size, const struct option *options, size_t count, struct settings *out,
                    warn_fn warn, void *context, struct fault *f) {
    struct settings s = settings_defaults(memory_size);
    char warning[256];
    for (size_t i = 0; i < count; i++) {
        struct str key = options[i].key, value = options[i].value;
        int vlen = value.len > 64 ? 64 : (int)value.len; /* in messages */
        if (is(key, "hardware-name")) {
            s.hardware_name = value;
        } else if (is(key, "vendor")) {
            s.vendor = value;
        } else if (is(key, "memory-bandwidth")) {
            if (!parse_u64(value, &s.memory_bandwidth) || s.memory_bandwidth == 0) {
                return fail(f, FAULT_INVALID_ARGUMENT, 0, "option memory-bandwidth = \"%.*s\" is not a positive integer",
                            vlen, value.ptr);
            }
        } else if (is(key, "gflops")) {
            if (!parse_number(value, &s.gflops) || !isfinite(s.gflops) || !(s.gflops > 0)) {
                return fail(f, FAULT_INVALID_ARGUMENT, 0, "option gflops = \"%.*s\" is not a positive number", vlen,
                            value.ptr);
            }
        } else if (is(key, "memory-limit")) {
            uint64_t limit;
            if (!parse_u64(value, &limit)) {
                return fail(f, FAULT_INVALID_ARGUMENT, 0, "option memory-limit = \"%.*s\" is not a byte count", vlen,
                            value.ptr);
            }
            if (limit > memory_size) {
                format_text(warning, sizeof warning,
                         "option memory-limit = %" PRIu64 " exceeds the device region of %" PRIu64
                         " bytes; using %" PRIu64,
                         limit, memory_size, memory_size);
                warn(context, warning);
                limit = memory_size;
            }
            s.memory_limit = limit;
        } else {
            int klen = key.len > 64 ? 64 : (int)key.len;
            format_text(warning, sizeof warning, "ignoring unknown option \"%.*s\"", klen, key.ptr);
            warn(context, warning);
        }
    }
    *out = s;
    return true;
}
