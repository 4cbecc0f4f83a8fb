#include "allocator.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* `value` rounded up to a multiple of `alignment` (a power of two); false if
 * that does not fit in 64 bits. */
static bool align_up(uint64_t value, uint64_t alignment, uint64_t *out) {
    uint64_t mask = alignment - 1;
    if (value > UINT64_MAX - mask) {
        return false;
    }
    *out = (value + mask) & ~mask;
    return true;
}

/* `value` rounded up to a multiple of GRANULE, or UINT64_MAX. */
static uint64_t round_to_granule(uint64_t value) {
    uint64_t rounded;
    return align_up(value, GRANULE, &rounded) ? rounded : UINT64_MAX;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}

/* Index of the first span whose offset is greater than `offset`. */
static size_t upper_bound(const struct span *spans, size_t len, uint64_t offset) {
    size_t lo = 0, hi = len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (spans[mid].offset <= offset) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Index of the first span whose offset is `offset` or more. */
static size_t lower_bound(const struct span *spans, size_t len, uint64_t offset) {
    return offset == 0 ? 0 : upper_bound(spans, len, offset - 1);
}

/* Replaces `spans[at]` by `count` (0 to 2) spans. The array has room. */
static void replace_at(struct span *spans, size_t *len, size_t at, const struct span *pieces, size_t count) {
    memmove(&spans[at + count], &spans[at + 1], (*len - at - 1) * sizeof *spans);
    memcpy(&spans[at], pieces, count * sizeof *spans);
    *len = *len - 1 + count;
}

static void insert_at(struct span *spans, size_t *len, size_t at, struct span span) {
    memmove(&spans[at + 1], &spans[at], (*len - at) * sizeof *spans);
    spans[at] = span;
    ++*len;
}

static void remove_at(struct span *spans, size_t *len, size_t at) {
    memmove(&spans[at], &spans[at + 1], (*len - at - 1) * sizeof *spans);
    --*len;
}

/* Room for `more_free` free and `more_live` live blocks, reserved before
 * anything changes: a request the heap cannot serve changes nothing. */
static bool make_room(struct best_fit *a, size_t more_free, size_t more_live, struct fault *f) {
    if (!reserve(&a->free, &a->free_cap, a->free_len + more_free, sizeof *a->free) ||
        !reserve(&a->live, &a->live_cap, a->live_len + more_live, sizeof *a->live)) {
        return fail(f, FAULT_INTERNAL, 0, "the guest's own heap is exhausted");
    }
    return true;
}

static void mark_live(struct best_fit *a, uint64_t offset, uint64_t reserved, uint64_t requested) {
    insert_at(a->live, &a->live_len, lower_bound(a->live, a->live_len, offset), (struct span){offset, reserved});
    a->bytes_in_use += reserved;
    if (a->bytes_in_use > a->peak) {
        a->peak = a->bytes_in_use;
    }
    if (requested > a->largest_alloc) {
        a->largest_alloc = requested;
    }
}

/* Takes `[start, end)` out of the free block at index `block`, whose pieces
 * before and after stay free (they touch live blocks: nothing to merge). */
static void carve(struct best_fit *a, size_t block, uint64_t start, uint64_t end) {
    struct span b = a->free[block];
    struct span pieces[2];
    size_t count = 0;
    if (start > b.offset) {
        pieces[count++] = (struct span){b.offset, start - b.offset};
    }
    if (b.offset + b.size > end) {
        pieces[count++] = (struct span){end, b.offset + b.size - end};
    }
    replace_at(a->free, &a->free_len, block, pieces, count);
}

/* Index of the free block holding all of `[start, end)`, or SIZE_MAX. */
static size_t free_block_containing(const struct best_fit *a, uint64_t start, uint64_t end) {
    size_t i = upper_bound(a->free, a->free_len, start);
    if (i == 0 || a->free[i - 1].offset + a->free[i - 1].size < end) {
        return SIZE_MAX;
    }
    return i - 1;
}

bool best_fit_init(struct best_fit *a, uint64_t limit, struct fault *f) {
    *a = (struct best_fit){.limit = limit};
    if (limit > 0) {
        if (!make_room(a, 1, 0, f)) {
            return false;
        }
        a->free[a->free_len++] = (struct span){0, limit};
    }
    return true;
}

void best_fit_release(struct best_fit *a) {
    free(a->free);
    free(a->live);
    *a = (struct best_fit){0};
}

bool best_fit_allocate(struct best_fit *a, uint64_t size, uint64_t alignment, uint64_t *offset, struct fault *f) {
    if (size == 0) {
        return fail(f, FAULT_INVALID_ARGUMENT, 0, "size must be greater than zero");
    }
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        return fail(f, FAULT_INVALID_ARGUMENT, 0, "alignment %" PRIu64 " is not a power of two", alignment);
    }
    /* The smallest block that holds `size` bytes once aligned; of equal
     * ones, the lowest. Alignment padding can make a block with enough bytes
     * too small, hence the check of each candidate; with the usual
     * alignments (at most GRANULE) every block start is already aligned. */
    size_t best = SIZE_MAX;
    uint64_t start = 0;
    for (size_t i = 0; i < a->free_len; i++) {
        struct span b = a->free[i];
        if (b.size < size || (best != SIZE_MAX && b.size >= a->free[best].size)) {
            continue;
        }
        uint64_t aligned;
        uint64_t end = b.offset + b.size;
        if (align_up(b.offset, alignment, &aligned) && aligned <= end && end - aligned >= size) {
            best = i;
            start = aligned;
        }
    }
    if (best == SIZE_MAX) {
        return fail(f, FAULT_OUT_OF_MEMORY, size, "out of memory for %" PRIu64 " bytes", size);
    }
    if (!make_room(a, 1, 1, f)) {
        return false;
    }
    uint64_t block_end = a->free[best].offset + a->free[best].size;
    uint64_t end = start + min_u64(round_to_granule(size), block_end - start);
    carve(a, best, start, end);
    mark_live(a, start, end - start, size);
    a->num_allocs++;
    *offset = start;
    return true;
}

bool best_fit_free(struct best_fit *a, uint64_t offset, struct fault *f) {
    size_t i = lower_bound(a->live, a->live_len, offset);
    if (i == a->live_len || a->live[i].offset != offset) {
        return fail(f, FAULT_UNKNOWN_HANDLE, offset, "no allocation starts at offset %" PRIu64, offset);
    }
    if (!make_room(a, 1, 0, f)) {
        return false;
    }
    struct span block = a->live[i];
    remove_at(a->live, &a->live_len, i);
    a->bytes_in_use -= block.size;
    /* Merge with the free blocks on either side, if they touch it. */
    size_t next = lower_bound(a->free, a->free_len, block.offset);
    bool after_previous = next > 0 && a->free[next - 1].offset + a->free[next - 1].size == block.offset;
    bool before_next = next < a->free_len && a->free[next].offset == block.offset + block.size;
    if (after_previous && before_next) {
        a->free[next - 1].size += block.size + a->free[next].size;
        remove_at(a->free, &a->free_len, next);
    } else if (after_previous) {
        a->free[next - 1].size += block.size;
    } else if (before_next) {
        a->free[next].offset = block.offset;
        a->free[next].size += block.size;
    } else {
        insert_at(a->free, &a->free_len, next, block);
    }
    return true;
}

static int by_offset(const void *left, const void *right) {
    uint64_t l = ((const struct span *)left)->offset, r = ((const struct span *)right)->offset;
    return (l > r) - (l < r);
}

/* Every refusal of `best_fit_adopt`, checked on `sorted` before any change. */
static bool check_adoption(const struct best_fit *a, const struct span *sorted, size_t count, struct fault *f) {
    for (size_t i = 1; i < count; i++) {
        if (sorted[i].offset == sorted[i - 1].offset) {
            return fail(f, FAULT_INVALID_ARGUMENT, 0, "offset %" PRIu64 " is adopted twice", sorted[i].offset);
        }
    }
    uint64_t previous_end = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t offset = sorted[i].offset, size = sorted[i].size;
        if (size == 0) {
            return fail(f, FAULT_INVALID_ARGUMENT, 0, "adopted range at %" PRIu64 " is empty", offset);
        }
        if (offset > a->limit || size > a->limit - offset) {
            return fail(f, FAULT_INVALID_ARGUMENT, 0,
                        "adopted range at %" PRIu64 " of %" PRIu64 " bytes exceeds the limit %" PRIu64, offset, size,
                        a->limit);
        }
        if (offset < previous_end) {
            return fail(f, FAULT_INVALID_ARGUMENT, 0, "adopted range at %" PRIu64 " overlaps another adopted range",
                        offset);
        }
        if (free_block_containing(a, offset, offset + size) == SIZE_MAX) {
            return fail(f, FAULT_INVALID_ARGUMENT, 0,
                        "adopted range at %" PRIu64 " of %" PRIu64 " bytes overlaps a live block", offset, size);
        }
        previous_end = offset + size;
    }
    return true;
}

bool best_fit_adopt(struct best_fit *a, const struct span *ranges, size_t count, struct fault *f) {
    if (count == 0) {
        return true;
    }
    struct span *sorted = count <= SIZE_MAX / sizeof *sorted ? malloc(count * sizeof *sorted) : NULL;
    if (sorted == NULL) {
        return fail(f, FAULT_INTERNAL, 0, "the guest's own heap is exhausted");
    }
    memcpy(sorted, ranges, count * sizeof *sorted);
    qsort(sorted, count, sizeof *sorted, by_offset);
    /* Each range turns one free block into at most two and adds a live one. */
    bool ok = check_adoption(a, sorted, count, f) && make_room(a, count, count, f);
    for (size_t i = 0; ok && i < count; i++) {
        uint64_t offset = sorted[i].offset, end = offset + sorted[i].size;
        /* The ranges are disjoint and each lay inside a free block, so carving
         * the earlier ones leaves each later one inside a piece. */
        size_t block = free_block_containing(a, offset, end);
        uint64_t block_end = a->free[block].offset + a->free[block].size;
        /* Round up like `allocate` does, but never into the next range. */
        uint64_t next = i + 1 < count ? sorted[i + 1].offset : UINT64_MAX;
        uint64_t reserved_end = min_u64(min_u64(round_to_granule(end), block_end), next);
        carve(a, block, offset, reserved_end);
        mark_live(a, offset, reserved_end - offset, sorted[i].size);
    }
    free(sorted);
    return ok;
}

struct memory_stats best_fit_stats(const struct best_fit *a) {
    uint64_t largest_free = 0;
    for (size_t i = 0; i < a->free_len; i++) {
        if (a->free[i].size > largest_free) {
            largest_free = a->free[i].size;
        }
    }
    return (struct memory_stats){
        .bytes_in_use = a->bytes_in_use,
        .peak_bytes_in_use = a->peak,
        .num_allocs = a->num_allocs,
        .largest_alloc_size = a->largest_alloc,
        .largest_free_block = largest_free,
        .limit = a->limit,
    };
}
