/* Unit tests of the C guest's pure modules, run natively (under ASan and
 * UBSan where the compiler has them) by `bash guest/c-device/build.sh test`.
 * The same cases as the reference guest's Rust tests, so both guests are
 * held to one behaviour. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "ordering.h"
#include "settings.h"

static int checks_failed;
static const char *current_test;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: in %s: check failed: %s\n", __FILE__, __LINE__, current_test, #cond); \
            checks_failed++;                                                                                 \
        }                                                                                                    \
    } while (0)

/* xorshift64: deterministic randomness. */
static uint64_t next_random(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* ---------------------------------------------------------------- allocator */

/* Free and live blocks tile [0, limit) exactly, no two free blocks touch,
 * and the bytes in use add up. */
static void check_invariants(const struct best_fit *a) {
    uint64_t cursor = 0, live_bytes = 0;
    size_t f = 0, l = 0;
    bool previous_free = false;
    while (f < a->free_len || l < a->live_len) {
        bool take_free = l == a->live_len || (f < a->free_len && a->free[f].offset < a->live[l].offset);
        struct span block = take_free ? a->free[f++] : a->live[l++];
        CHECK(block.offset == cursor);
        CHECK(block.size > 0);
        CHECK(!(take_free && previous_free));
        if (!take_free) {
            live_bytes += block.size;
        }
        cursor = block.offset + block.size;
        previous_free = take_free;
    }
    CHECK(cursor == a->limit);
    CHECK(live_bytes == a->bytes_in_use);
}

static uint64_t must_allocate(struct best_fit *a, uint64_t size, uint64_t alignment) {
    uint64_t offset = UINT64_MAX;
    struct fault f;
    CHECK(best_fit_allocate(a, size, alignment, &offset, &f));
    return offset;
}

static void test_best_fit_picks_the_smallest_block(void) {
    struct best_fit a;
    CHECK(best_fit_init(&a, 10 * 1024, NULL));
    uint64_t x = must_allocate(&a, 1024, 64);
    must_allocate(&a, 64, 64);
    uint64_t z = must_allocate(&a, 256, 64);
    must_allocate(&a, 64, 64);
    CHECK(best_fit_free(&a, x, NULL)); /* a 1024-byte hole */
    CHECK(best_fit_free(&a, z, NULL)); /* a 256-byte hole */
    /* 200 bytes fit both holes (and the tail); best fit takes the small one. */
    CHECK(must_allocate(&a, 200, 64) == z);
    CHECK(must_allocate(&a, 1000, 64) == x);
    check_invariants(&a);
    best_fit_release(&a);
}

static void test_freeing_everything_coalesces_to_one_block(void) {
    uint64_t rng = 7;
    for (int round = 0; round < 200; round++) {
        struct best_fit a;
        CHECK(best_fit_init(&a, 1 << 16, NULL));
        uint64_t blocks[12];
        size_t count = 0;
        for (int i = 0; i < 12; i++) {
            uint64_t offset;
            if (best_fit_allocate(&a, 1 + next_random(&rng) % 3000, 64, &offset, NULL)) {
                blocks[count++] = offset;
            }
        }
        for (size_t i = count; i > 1; i--) { /* Fisher-Yates */
            size_t j = (size_t)(next_random(&rng) % i);
            uint64_t t = blocks[i - 1];
            blocks[i - 1] = blocks[j];
            blocks[j] = t;
        }
        for (size_t i = 0; i < count; i++) {
            CHECK(best_fit_free(&a, blocks[i], NULL));
            check_invariants(&a);
        }
        struct memory_stats stats = best_fit_stats(&a);
        CHECK(stats.bytes_in_use == 0);
        CHECK(stats.largest_free_block == 1 << 16);
        CHECK(a.free_len == 1);
        best_fit_release(&a);
    }
}

static void test_sizes_round_to_granules_but_free_returns_exactly_what_was_taken(void) {
    struct best_fit a;
    CHECK(best_fit_init(&a, 4096, NULL));
    uint64_t x = must_allocate(&a, 1, 1);
    uint64_t y = must_allocate(&a, 257, 1);
    CHECK(x == 0 && y == GRANULE);
    CHECK(best_fit_stats(&a).bytes_in_use == 3 * GRANULE);
    CHECK(best_fit_stats(&a).largest_alloc_size == 257);
    CHECK(best_fit_free(&a, x, NULL));
    CHECK(best_fit_free(&a, y, NULL));
    CHECK(best_fit_stats(&a).largest_free_block == 4096);
    best_fit_release(&a);
}

static void test_alignment_is_honoured_and_padding_reused(void) {
    struct best_fit a;
    CHECK(best_fit_init(&a, 1 << 16, NULL));
    uint64_t first = must_allocate(&a, 64, 64);
    uint64_t aligned = must_allocate(&a, 100, 4096);
    CHECK(aligned % 4096 == 0);
    CHECK(aligned >= first + 64);
    /* The padding between them is free and gets used. */
    CHECK(must_allocate(&a, 64, 64) < aligned);
    check_invariants(&a);
    best_fit_release(&a);
}

static void test_malformed_requests_are_refused(void) {
    struct best_fit a;
    struct fault f;
    uint64_t offset;
    CHECK(best_fit_init(&a, 1 << 16, NULL));
    CHECK(!best_fit_allocate(&a, 0, 64, &offset, &f) && f.kind == FAULT_INVALID_ARGUMENT);
    CHECK(!best_fit_allocate(&a, 64, 0, &offset, &f) && f.kind == FAULT_INVALID_ARGUMENT);
    CHECK(!best_fit_allocate(&a, 64, 48, &offset, &f) && f.kind == FAULT_INVALID_ARGUMENT);
    CHECK(strstr(f.message, "48") != NULL);
    /* Absurd sizes and alignments are out of memory, never an overflow. */
    CHECK(!best_fit_allocate(&a, UINT64_MAX, 64, &offset, &f) && f.kind == FAULT_OUT_OF_MEMORY &&
          f.value == UINT64_MAX);
    CHECK(!best_fit_allocate(&a, UINT64_MAX - 10, 1, &offset, &f) && f.kind == FAULT_OUT_OF_MEMORY);
    must_allocate(&a, 64, 64);
    CHECK(!best_fit_allocate(&a, 64, UINT64_C(1) << 63, &offset, &f) && f.kind == FAULT_OUT_OF_MEMORY &&
          f.value == 64);
    CHECK(best_fit_stats(&a).num_allocs == 1);
    check_invariants(&a);
    best_fit_release(&a);
}

static void test_the_tail_of_an_odd_sized_region_is_usable(void) {
    struct best_fit a;
    CHECK(best_fit_init(&a, 1000, NULL));
    CHECK(must_allocate(&a, 1000, 64) == 0);
    CHECK(best_fit_free(&a, 0, NULL));
    uint64_t x = must_allocate(&a, 3 * GRANULE, 64);
    /* 1000 - 768 = 232 bytes are left: less than a granule, enough for 40. */
    CHECK(must_allocate(&a, 40, 64) == 3 * GRANULE);
    CHECK(best_fit_free(&a, x, NULL));
    CHECK(best_fit_free(&a, 3 * GRANULE, NULL));
    CHECK(best_fit_stats(&a).largest_free_block == 1000);
    check_invariants(&a);
    best_fit_release(&a);
}

static void test_out_of_memory_then_recovery(void) {
    struct best_fit a;
    struct fault f;
    uint64_t offset;
    CHECK(best_fit_init(&a, 1024, NULL));
    uint64_t x = must_allocate(&a, 1000, 64);
    CHECK(!best_fit_allocate(&a, 64, 64, &offset, &f) && f.kind == FAULT_OUT_OF_MEMORY && f.value == 64);
    CHECK(best_fit_free(&a, x, NULL));
    CHECK(must_allocate(&a, 1024, 64) == 0);
    CHECK(!best_fit_free(&a, 12345, &f) && f.kind == FAULT_UNKNOWN_HANDLE && f.value == 12345);
    CHECK(!best_fit_free(&a, x + 64, &f) && f.kind == FAULT_UNKNOWN_HANDLE && f.value == x + 64);
    struct memory_stats stats = best_fit_stats(&a);
    CHECK(stats.bytes_in_use == 1024 && stats.peak_bytes_in_use == 1024 && stats.num_allocs == 2);
    best_fit_release(&a);
}

static void test_adopt_carves_out_live_ranges(void) {
    struct best_fit a;
    CHECK(best_fit_init(&a, 8192, NULL));
    struct span ranges[] = {{4096, 64}, {0, 100}};
    CHECK(best_fit_adopt(&a, ranges, 2, NULL));
    check_invariants(&a);
    for (int i = 0; i < 10; i++) {
        uint64_t x = must_allocate(&a, 64, 64);
        CHECK((x >= 128 && x < 4096) || x >= 4160);
    }
    CHECK(best_fit_stats(&a).num_allocs == 10); /* adopted ranges are not allocations */
    CHECK(best_fit_free(&a, 4096, NULL));
    CHECK(best_fit_free(&a, 0, NULL));
    check_invariants(&a);
    best_fit_release(&a);
}

static void test_adopt_is_all_or_nothing(void) {
    struct best_fit a;
    struct fault f;
    CHECK(best_fit_init(&a, 8192, NULL));
    uint64_t live = must_allocate(&a, 64, 64);
    struct span refused[][2] = {
        {{1024, 64}, {live, 64}},             /* a live block */
        {{1024, 64}, {8190, 64}},             /* past the limit */
        {{1024, 64}, {UINT64_MAX - 1, 64}},   /* past 64 bits */
        {{1024, 64}, {1050, 64}},             /* each other */
        {{1024, 64}, {2048, 0}},              /* empty */
        {{1024, 64}, {1024, 64}},             /* twice */
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(!best_fit_adopt(&a, refused[i], 2, &f) && f.kind == FAULT_INVALID_ARGUMENT);
        CHECK(a.live_len == 1); /* no partial adoption */
        check_invariants(&a);
    }
    /* Ranges closer than a granule keep exactly to their own bytes. */
    struct span close[] = {{1024, 10}, {1040, 10}};
    CHECK(best_fit_adopt(&a, close, 2, NULL));
    check_invariants(&a);
    CHECK(a.live_len == 3);
    CHECK(a.live[0].offset == 0 && a.live[0].size == GRANULE);
    CHECK(a.live[1].offset == 1024 && a.live[1].size == 16);
    CHECK(a.live[2].offset == 1040 && a.live[2].size == 1280 - 1040);
    best_fit_release(&a);
}

static void test_randomized_operations_keep_invariants(void) {
    uint64_t rng = UINT64_C(0x9E3779B97F4A7C15);
    const uint64_t limit = (1 << 20) + 100; /* not a multiple of the granule */
    struct best_fit a;
    CHECK(best_fit_init(&a, limit, NULL));
    /* What was handed out, as (offset, requested size), unordered. */
    static struct span handed[4096];
    size_t handed_len = 0;
    uint64_t peak = 0, allocs = 0;
    for (int step = 0; step < 20000; step++) {
        if ((next_random(&rng) % 3 != 0 || handed_len == 0) && handed_len < 4096) {
            uint64_t size = 1 + next_random(&rng) % 8192;
            uint64_t alignment = UINT64_C(1) << (next_random(&rng) % 13);
            uint64_t offset;
            struct fault f;
            if (best_fit_allocate(&a, size, alignment, &offset, &f)) {
                allocs++;
                CHECK(offset % alignment == 0);
                CHECK(offset + size <= limit);
                for (size_t i = 0; i < handed_len; i++) {
                    CHECK(offset + size <= handed[i].offset || handed[i].offset + handed[i].size <= offset);
                }
                handed[handed_len++] = (struct span){offset, size};
            } else {
                /* Only when no free block could hold it even unaligned. */
                CHECK(f.kind == FAULT_OUT_OF_MEMORY);
                CHECK(best_fit_stats(&a).largest_free_block < size + alignment);
            }
        } else {
            size_t nth = (size_t)(next_random(&rng) % handed_len);
            CHECK(best_fit_free(&a, handed[nth].offset, NULL));
            handed[nth] = handed[--handed_len];
        }
        if (step % 64 == 0) {
            check_invariants(&a);
        }
        struct memory_stats stats = best_fit_stats(&a);
        peak = stats.bytes_in_use > peak ? stats.bytes_in_use : peak;
        CHECK(stats.peak_bytes_in_use == peak);
        CHECK(stats.num_allocs == allocs);
    }
    check_invariants(&a);
    for (size_t i = 0; i < handed_len; i++) {
        CHECK(best_fit_free(&a, handed[i].offset, NULL));
    }
    CHECK(best_fit_stats(&a).largest_free_block == limit);
    best_fit_release(&a);
}

/* ----------------------------------------------------------------- ordering */

static uint64_t new_stream(struct ordering *o) {
    uint64_t id = 0;
    CHECK(ordering_create_stream(o, &id, NULL));
    return id;
}

static uint64_t new_event(struct ordering *o) {
    uint64_t id = 0;
    CHECK(ordering_create_event(o, &id, NULL));
    return id;
}

/* The ticket of the next submit on `s`; its wait list is freed. */
static struct ticket submit(struct ordering *o, uint64_t s) {
    struct ticket t = {0};
    CHECK(ordering_submit(o, s, &t, NULL));
    free(t.after);
    t.after = NULL;
    return t;
}

/* True when the next ticket on `s` waits for exactly `stream`'s `seq`
 * (`stream` 0: for nothing). */
static bool next_waits_for(struct ordering *o, uint64_t s, uint64_t stream, uint64_t seq) {
    struct ticket t = {0};
    CHECK(ordering_submit(o, s, &t, NULL));
    bool as_expected = stream == 0 ? t.after_len == 0
                                   : t.after_len == 1 && t.after[0].stream == stream && t.after[0].seq == seq;
    free(t.after);
    return as_expected;
}

static void test_sequence_numbers_increase_per_stream(void) {
    struct ordering o = {0};
    struct fault f;
    struct ticket t;
    uint64_t a = new_stream(&o), b = new_stream(&o);
    CHECK(submit(&o, a).seq == 1);
    CHECK(submit(&o, a).seq == 2);
    CHECK(submit(&o, b).seq == 1);
    CHECK(!ordering_submit(&o, 99, &t, &f) && f.kind == FAULT_UNKNOWN_HANDLE && f.value == 99);
    CHECK(ordering_destroy_stream(&o, a, NULL));
    CHECK(!ordering_submit(&o, a, &t, &f) && f.kind == FAULT_UNKNOWN_HANDLE);
    CHECK(!ordering_destroy_stream(&o, a, &f) && f.value == a);
    ordering_release(&o);
}

static void test_ids_are_distinct_across_kinds(void) {
    struct ordering o = {0};
    uint64_t timer;
    uint64_t s = new_stream(&o), e = new_event(&o);
    CHECK(ordering_create_timer(&o, &timer, NULL));
    uint64_t s2 = new_stream(&o);
    CHECK(s != 0 && s != e && e != timer && timer != s2 && s != s2);
    CHECK(!ordering_destroy_event(&o, s, NULL)); /* a stream id is no event */
    ordering_release(&o);
}

static void test_events_order_streams(void) {
    struct ordering o = {0};
    uint64_t a = new_stream(&o), b = new_stream(&o), e = new_event(&o);
    struct ticket marker;
    CHECK(ordering_event_status(&o, e) == EVENT_UNKNOWN);
    submit(&o, a);
    CHECK(ordering_record_event(&o, a, e, &marker, NULL) && marker.seq == 2 && marker.after_len == 0);
    CHECK(ordering_event_status(&o, e) == EVENT_PENDING);
    CHECK(ordering_wait_event(&o, b, e, NULL));
    CHECK(next_waits_for(&o, b, a, 2));
    CHECK(next_waits_for(&o, b, 0, 0)); /* the wait is consumed by the first ticket */
    CHECK(ordering_complete(&o, a, 1, 10, true, NULL));
    CHECK(ordering_event_status(&o, e) == EVENT_PENDING);
    CHECK(ordering_complete(&o, a, 2, 20, true, NULL));
    CHECK(ordering_event_status(&o, e) == EVENT_COMPLETE);
    CHECK(ordering_wait_event(&o, b, e, NULL)); /* waiting for a fired event adds nothing */
    CHECK(next_waits_for(&o, b, 0, 0));
    ordering_release(&o);
}

static void test_waits_are_merged_and_carried_by_markers(void) {
    struct ordering o = {0};
    struct fault f;
    uint64_t a = new_stream(&o), b = new_stream(&o), c = new_stream(&o);
    submit(&o, a);
    CHECK(ordering_add_dependency(&o, c, a, NULL));
    submit(&o, a);
    CHECK(ordering_add_dependency(&o, c, a, NULL));
    submit(&o, b);
    CHECK(ordering_add_dependency(&o, c, b, NULL));
    CHECK(ordering_add_dependency(&o, c, c, NULL)); /* a stream never waits on itself */
    uint64_t e = new_event(&o);
    struct ticket marker;
    CHECK(ordering_record_event(&o, c, e, &marker, NULL));
    CHECK(marker.seq == 1 && marker.after_len == 2);
    CHECK(marker.after_len == 2 && marker.after[0].stream == a && marker.after[0].seq == 2);
    CHECK(marker.after_len == 2 && marker.after[1].stream == b && marker.after[1].seq == 1);
    free(marker.after);
    CHECK(next_waits_for(&o, c, 0, 0));
    /* A wait on an event recorded on the same stream is implied by order. */
    uint64_t e2 = new_event(&o);
    CHECK(ordering_record_event(&o, c, e2, &marker, NULL));
    CHECK(ordering_wait_event(&o, c, e2, NULL));
    CHECK(next_waits_for(&o, c, 0, 0));
    /* Unrecorded events are no-ops; unknown ids are errors. */
    uint64_t never = new_event(&o);
    CHECK(ordering_wait_event(&o, a, never, NULL));
    CHECK(next_waits_for(&o, a, 0, 0));
    CHECK(!ordering_wait_event(&o, a, 999, &f) && f.value == 999);
    CHECK(!ordering_wait_event(&o, 999, e, &f) && f.value == 999);
    CHECK(!ordering_add_dependency(&o, a, 999, &f) && f.value == 999);
    CHECK(!ordering_add_dependency(&o, 999, a, &f) && f.value == 999);
    ordering_release(&o);
}

static void test_satisfied_waits_are_dropped(void) {
    struct ordering o = {0};
    uint64_t a = new_stream(&o), b = new_stream(&o);
    submit(&o, a);
    CHECK(ordering_complete(&o, a, 1, 5, true, NULL));
    CHECK(ordering_add_dependency(&o, b, a, NULL));
    CHECK(next_waits_for(&o, b, 0, 0));
    submit(&o, a);
    CHECK(ordering_add_dependency(&o, b, a, NULL));
    CHECK(ordering_complete(&o, a, 2, 6, true, NULL)); /* completed before the ticket: dropped too */
    CHECK(next_waits_for(&o, b, 0, 0));
    submit(&o, a);
    CHECK(ordering_add_dependency(&o, b, a, NULL));
    CHECK(next_waits_for(&o, b, a, 3));
    ordering_release(&o);
}

static void test_failures_mark_the_stream_and_later_events(void) {
    struct ordering o = {0};
    struct fault f;
    struct ticket t;
    uint64_t a = new_stream(&o), before = new_event(&o), after = new_event(&o);
    CHECK(ordering_record_event(&o, a, before, &t, NULL));
    submit(&o, a);
    CHECK(ordering_record_event(&o, a, after, &t, NULL));
    CHECK(ordering_stream_status(&o, a, NULL));
    CHECK(ordering_complete(&o, a, 1, 1, true, NULL));
    CHECK(ordering_complete(&o, a, 2, 2, false, NULL));
    CHECK(ordering_event_status(&o, after) == EVENT_PENDING); /* not run yet */
    CHECK(ordering_complete(&o, a, 3, 3, true, NULL));
    CHECK(ordering_event_status(&o, before) == EVENT_COMPLETE);
    CHECK(ordering_event_status(&o, after) == EVENT_ERROR);
    CHECK(!ordering_stream_status(&o, a, &f) && strstr(f.message, "work 2") != NULL);
    CHECK(!ordering_stream_status(&o, 42, &f) && f.kind == FAULT_UNKNOWN_HANDLE);
    ordering_release(&o);
}

static void test_events_outlive_their_stream(void) {
    struct ordering o = {0};
    struct ticket t;
    uint64_t a = new_stream(&o), b = new_stream(&o);
    uint64_t done = new_event(&o), failed = new_event(&o), never_ran = new_event(&o);
    CHECK(ordering_record_event(&o, a, done, &t, NULL));
    CHECK(ordering_complete(&o, a, 1, 1, true, NULL));
    CHECK(ordering_record_event(&o, b, failed, &t, NULL));
    CHECK(ordering_complete(&o, b, 1, 1, false, NULL));
    CHECK(ordering_record_event(&o, b, never_ran, &t, NULL));
    CHECK(ordering_destroy_stream(&o, a, NULL));
    CHECK(ordering_destroy_stream(&o, b, NULL));
    CHECK(ordering_event_status(&o, done) == EVENT_COMPLETE);
    CHECK(ordering_event_status(&o, failed) == EVENT_ERROR);
    CHECK(ordering_event_status(&o, never_ran) == EVENT_ERROR);
    uint64_t c = new_stream(&o);
    CHECK(ordering_wait_event(&o, c, done, NULL));
    CHECK(next_waits_for(&o, c, 0, 0));
    ordering_release(&o);
}

static void test_completions_beyond_the_last_ticket_are_reported_and_skipped(void) {
    struct ordering o = {0};
    struct fault f;
    uint64_t a = new_stream(&o);
    submit(&o, a);
    CHECK(!ordering_complete(&o, a, 3, 1, true, &f) && f.kind == FAULT_INVALID_ARGUMENT);
    CHECK(submit(&o, a).seq == 4); /* the next ticket moves past everything the host ran */
    CHECK(!ordering_complete(&o, 77, 1, 1, true, &f) && f.kind == FAULT_UNKNOWN_HANDLE);
    ordering_release(&o);
}

static void test_timers_use_completion_times(void) {
    struct ordering o = {0};
    struct ticket start, stop;
    uint64_t elapsed = 0, t;
    uint64_t a = new_stream(&o);
    CHECK(ordering_create_timer(&o, &t, NULL));
    CHECK(!ordering_timer_elapsed(&o, t, &elapsed));
    CHECK(ordering_mark_timer(&o, a, t, true, &start, NULL));
    submit(&o, a);
    CHECK(ordering_mark_timer(&o, a, t, false, &stop, NULL));
    CHECK(!ordering_timer_elapsed(&o, t, &elapsed));
    CHECK(ordering_complete(&o, a, start.seq, 1000, true, NULL));
    CHECK(ordering_complete(&o, a, 2, 1500, true, NULL));
    CHECK(!ordering_timer_elapsed(&o, t, &elapsed));
    CHECK(ordering_complete(&o, a, stop.seq, 4000, true, NULL));
    CHECK(ordering_timer_elapsed(&o, t, &elapsed) && elapsed == 3000);
    /* Restarting clears the old measurement. */
    CHECK(ordering_mark_timer(&o, a, t, true, &start, NULL));
    CHECK(!ordering_timer_elapsed(&o, t, &elapsed));
    CHECK(ordering_complete(&o, a, start.seq, 5000, true, NULL));
    CHECK(ordering_mark_timer(&o, a, t, false, &stop, NULL));
    CHECK(ordering_complete(&o, a, stop.seq, 5250, true, NULL));
    CHECK(ordering_timer_elapsed(&o, t, &elapsed) && elapsed == 250);
    CHECK(ordering_destroy_timer(&o, t, NULL));
    CHECK(!ordering_timer_elapsed(&o, t, &elapsed));
    CHECK(!ordering_destroy_timer(&o, t, NULL));
    CHECK(!ordering_mark_timer(&o, a, t, true, &start, NULL));
    ordering_release(&o);
}

static void test_timers_span_streams_and_survive_them(void) {
    struct ordering o = {0};
    struct ticket start, stop;
    uint64_t elapsed = 0, t;
    uint64_t a = new_stream(&o), b = new_stream(&o);
    CHECK(ordering_create_timer(&o, &t, NULL));
    CHECK(ordering_mark_timer(&o, a, t, true, &start, NULL));
    CHECK(ordering_mark_timer(&o, b, t, false, &stop, NULL));
    CHECK(ordering_complete(&o, b, stop.seq, 900, true, NULL));
    CHECK(ordering_complete(&o, a, start.seq, 100, true, NULL));
    CHECK(ordering_destroy_stream(&o, a, NULL));
    CHECK(ordering_destroy_stream(&o, b, NULL));
    CHECK(ordering_timer_elapsed(&o, t, &elapsed) && elapsed == 800);
    ordering_release(&o);
}

/* Drives four streams at random as a host would (submitting, completing in
 * seq order, adding waits) and checks every ticket. */
static void test_randomized_tickets_are_well_formed(void) {
    uint64_t rng = UINT64_C(0x2545F4914F6CDD1D);
    struct ordering o = {0};
    uint64_t streams[4], events[3], issued[4] = {0}, done[4] = {0};
    for (int i = 0; i < 4; i++) {
        streams[i] = new_stream(&o);
    }
    for (int i = 0; i < 3; i++) {
        events[i] = new_event(&o);
    }
    for (int step = 0; step < 5000; step++) {
        size_t i = (size_t)(next_random(&rng) % 4);
        uint64_t s = streams[i];
        struct ticket t = {0};
        bool ticketed = false;
        switch (next_random(&rng) % 6) {
        case 0:
            if (done[i] < issued[i]) {
                done[i]++;
                CHECK(ordering_complete(&o, s, done[i], done[i], true, NULL));
                break;
            }
            ticketed = ordering_submit(&o, s, &t, NULL);
            break;
        case 1:
            CHECK(ordering_add_dependency(&o, s, streams[next_random(&rng) % 4], NULL));
            break;
        case 2:
            CHECK(ordering_wait_event(&o, s, events[next_random(&rng) % 3], NULL));
            break;
        case 3:
            ticketed = ordering_record_event(&o, s, events[next_random(&rng) % 3], &t, NULL);
            CHECK(ticketed);
            break;
        default:
            ticketed = ordering_submit(&o, s, &t, NULL);
            CHECK(ticketed);
            break;
        }
        if (ticketed) {
            CHECK(t.seq == issued[i] + 1);
            issued[i] = t.seq;
            for (size_t d = 0; d < t.after_len; d++) {
                size_t j = (size_t)(t.after[d].stream - streams[0]); /* ids 1..4 */
                CHECK(j < 4 && j != i);
                CHECK(j < 4 && t.after[d].seq <= issued[j]); /* on work already submitted */
                CHECK(j < 4 && t.after[d].seq > done[j]);    /* not yet complete */
                for (size_t e = 0; e < d; e++) {
                    CHECK(t.after[e].stream != t.after[d].stream); /* one wait per stream */
                }
            }
            free(t.after);
        }
        for (int e = 0; e < 3; e++) {
            CHECK(ordering_event_status(&o, events[e]) != EVENT_ERROR);
        }
    }
    ordering_release(&o);
}

/* ----------------------------------------------------------------- settings */

static void no_warning(void *context, const char *warning) {
    (void)context;
    fprintf(stderr, "in %s: unexpected warning: %s\n", current_test, warning);
    checks_failed++;
}

static void count_warning(void *context, const char *warning) {
    (void)warning;
    ++*(int *)context;
}

#define OPTION(k, v) {{k, sizeof k - 1}, {v, sizeof v - 1}}

static bool str_is(struct str s, const char *text) {
    return s.len == strlen(text) && memcmp(s.ptr, text, s.len) == 0;
}

static void test_settings_defaults_and_overrides(void) {
    struct settings s;
    CHECK(settings_parse(1 << 20, NULL, 0, &s, no_warning, NULL, NULL));
    CHECK(str_is(s.hardware_name, DEFAULT_HARDWARE_NAME) && s.memory_limit == 1 << 20 && s.gflops == 100.0);
    struct option given[] = {
        OPTION("hardware-name", "Test Board 7"), OPTION("vendor", "ACME"), OPTION("memory-bandwidth", "1000"),
        OPTION("gflops", "2.5"),                 OPTION("memory-limit", " 4096 "),
    };
    CHECK(settings_parse(1 << 20, given, 5, &s, no_warning, NULL, NULL));
    CHECK(str_is(s.hardware_name, "Test Board 7") && str_is(s.vendor, "ACME"));
    CHECK(s.memory_bandwidth == 1000 && s.gflops == 2.5 && s.memory_limit == 4096);
    const struct {
        const char *text;
        double value;
    } numbers[] = {{"40", 40.0}, {"+0.125", 0.125}, {"1e3", 1000.0}, {".5", 0.5}, {"7.", 7.0}, {"0.1", 0.1},
                   {"123.456", 123.456}, {"2.5E-2", 0.025}, {"00012", 12.0}};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        struct option gflops = {{"gflops", 6}, {numbers[i].text, strlen(numbers[i].text)}};
        CHECK(settings_parse(1 << 20, &gflops, 1, &s, no_warning, NULL, NULL) && s.gflops == numbers[i].value);
    }
}

static void test_settings_warn_and_refuse(void) {
    struct settings s;
    struct fault f;
    int warnings = 0;
    struct option odd[] = {OPTION("colour", "blue"), OPTION("memory-limit", "999999")};
    CHECK(settings_parse(1000, odd, 2, &s, count_warning, &warnings, NULL));
    CHECK(s.memory_limit == 1000 && warnings == 2);
    struct option malformed[] = {
        OPTION("memory-bandwidth", "fast"), OPTION("memory-bandwidth", "0"), OPTION("memory-bandwidth", "-5"),
        OPTION("gflops", "NaN"),            OPTION("gflops", "inf"),         OPTION("gflops", "-1"),
        OPTION("gflops", "1e999"),          OPTION("gflops", "0"),           OPTION("gflops", "1e"),
        OPTION("memory-limit", "1.5e6"),    OPTION("memory-limit", ""),      OPTION("memory-limit", "99999999999999999999"),
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char key[32];
        format_text(key, sizeof key, "%.*s", (int)malformed[i].key.len, malformed[i].key.ptr);
        CHECK(!settings_parse(1 << 20, &malformed[i], 1, &s, no_warning, NULL, &f));
        CHECK(f.kind == FAULT_INVALID_ARGUMENT && strstr(f.message, key) != NULL);
    }
}

static void test_format_text(void) {
    char out[16];
    format_text(out, sizeof out, "%s=%" PRIu64 " %.*s%%", "n", UINT64_C(18446744073709551615), 2, "abc");
    CHECK(strcmp(out, "n=1844674407370") == 0); /* truncated, terminated */
    format_text(out, sizeof out, "%u|%.*s|", 0u, 3, "ab\0c");
    CHECK(memcmp(out, "0|ab\0|", 7) == 0); /* exactly 3 bytes, NUL included */
}

int main(void) {
    static const struct {
        const char *name;
        void (*run)(void);
    } tests[] = {
#define TEST(name) {#name, name}
        TEST(test_best_fit_picks_the_smallest_block),
        TEST(test_freeing_everything_coalesces_to_one_block),
        TEST(test_sizes_round_to_granules_but_free_returns_exactly_what_was_taken),
        TEST(test_alignment_is_honoured_and_padding_reused),
        TEST(test_malformed_requests_are_refused),
        TEST(test_the_tail_of_an_odd_sized_region_is_usable),
        TEST(test_out_of_memory_then_recovery),
        TEST(test_adopt_carves_out_live_ranges),
        TEST(test_adopt_is_all_or_nothing),
        TEST(test_randomized_operations_keep_invariants),
        TEST(test_sequence_numbers_increase_per_stream),
        TEST(test_ids_are_distinct_across_kinds),
        TEST(test_events_order_streams),
        TEST(test_waits_are_merged_and_carried_by_markers),
        TEST(test_satisfied_waits_are_dropped),
        TEST(test_failures_mark_the_stream_and_later_events),
        TEST(test_events_outlive_their_stream),
        TEST(test_completions_beyond_the_last_ticket_are_reported_and_skipped),
        TEST(test_timers_use_completion_times),
        TEST(test_timers_span_streams_and_survive_them),
        TEST(test_randomized_tickets_are_well_formed),
        TEST(test_settings_defaults_and_overrides),
        TEST(test_settings_warn_and_refuse),
        TEST(test_format_text),
#undef TEST
    };
    size_t count = sizeof tests / sizeof tests[0], failed = 0;
    for (size_t i = 0; i < count; i++) {
        int before = checks_failed;
        current_test = tests[i].name;
        tests[i].run();
        if (checks_failed != before) {
            failed++;
            fprintf(stderr, "FAILED %s\n", tests[i].name);
        }
    }
    printf("c-device: %zu passed, %zu failed\n", count - failed, failed);
    return failed == 0 ? 0 : 1;
}
