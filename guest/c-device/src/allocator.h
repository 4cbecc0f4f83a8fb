/* Best-fit placement with coalescing over the offsets [0, limit).
 *
 * Two arrays sorted by offset: the free blocks (never two touching: they are
 * merged on free) and the live ones. `free` finds its block by binary search
 * and merges with its neighbours; `allocate` scans the free blocks for the
 * smallest that fits. That scan is O(free blocks), not O(log n) like the
 * reference guest's two B-trees, but coalescing keeps the free list short
 * (a training step has tens of free blocks, not thousands), and a scan over
 * one small array beats a tree in code size and in speed at that size.
 * Inserting into a sorted array moves its tail, a memmove of 16-byte
 * entries: cheap for the hundreds of live tensors a model holds.
 *
 * Plain C, no WIT types: tests/unit.c tests it natively.
 */
#ifndef TFWASM_C_DEVICE_ALLOCATOR_H
#define TFWASM_C_DEVICE_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fault.h"

/* Sizes are rounded up to this, so block boundaries stay aligned for the
 * host's requests (256 bytes, what TensorFlow's BFC allocator requires) and
 * tiny fragments do not accumulate. A block that cannot hold the rounded
 * size but can hold the exact one (the tail of a region whose size is not a
 * multiple of 256) is still used. */
#define GRANULE UINT64_C(256)

/* A block of the region. For a live block, `size` is the bytes reserved
 * (the rounded size), so a free gives back exactly what was taken. */
struct span {
    uint64_t offset;
    uint64_t size;
};

struct memory_stats {
    /* Bytes reserved for live blocks, rounding included: with the free bytes
     * it adds up to the limit. */
    uint64_t bytes_in_use;
    uint64_t peak_bytes_in_use;
    /* Allocations since creation (adopted ranges are not counted). */
    uint64_t num_allocs;
    /* Largest size ever requested (or adopted), before rounding. */
    uint64_t largest_alloc_size;
    uint64_t largest_free_block;
    uint64_t limit;
};

struct best_fit {
    uint64_t limit;
    struct span *free;
    size_t free_len, free_cap;
    struct span *live;
    size_t live_len, live_cap;
    uint64_t bytes_in_use, peak, num_allocs, largest_alloc;
};

/* An allocator over [0, limit). False if the guest's heap is exhausted. */
bool best_fit_init(struct best_fit *a, uint64_t limit, struct fault *f);
void best_fit_release(struct best_fit *a);

/* Places `size` bytes at a multiple of `alignment` (a power of two), in the
 * smallest free block that can hold them. */
bool best_fit_allocate(struct best_fit *a, uint64_t size, uint64_t alignment, uint64_t *offset, struct fault *f);

/* Releases the live block starting at `offset`. */
bool best_fit_free(struct best_fit *a, uint64_t offset, struct fault *f);

/* Marks `count` ranges live, carving them out of free space. All or
 * nothing: every range is checked first (non-empty, inside the limit,
 * disjoint from the others and from every live block), so a refused request
 * leaves the allocator as it was. */
bool best_fit_adopt(struct best_fit *a, const struct span *ranges, size_t count, struct fault *f);

struct memory_stats best_fit_stats(const struct best_fit *a);

#endif
