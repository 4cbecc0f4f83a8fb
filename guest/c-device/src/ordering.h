/* Stream, event and timer semantics.
 *
 * Each stream is an in-order queue: its work gets increasing sequence
 * numbers, and the host runs it in that order. Cross-stream order comes from
 * two requests TensorFlow makes: "stream A waits for everything on B so far"
 * (`ordering_add_dependency`) and "stream A waits for event E"
 * (`ordering_wait_event`). Both are remembered on the waiting stream and
 * attached to its next ticket; later work on A is ordered after that ticket
 * anyway.
 *
 * Event and timer states are derived from the completions the host reports,
 * so they agree with the host's own view by construction.
 *
 * Ids come from one counter, so streams, events and timers never share one,
 * and each kind lives in an array sorted by id: a new id is the largest, so
 * creating appends, and lookups are binary searches.
 *
 * Plain C, no WIT types: tests/unit.c tests it natively.
 */
#ifndef TFWASM_C_DEVICE_ORDERING_H
#define TFWASM_C_DEVICE_ORDERING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fault.h"

/* "Work `seq` on `stream`": a ticket's position, or a wait on it. */
struct dep {
    uint64_t stream;
    uint64_t seq;
};

/* Where work goes on its stream, and the work on other streams it waits
 * for. `after` is the caller's to free (NULL when `after_len` is 0). */
struct ticket {
    uint64_t seq;
    struct dep *after;
    size_t after_len;
};

enum event_state { EVENT_UNKNOWN, EVENT_PENDING, EVENT_COMPLETE, EVENT_ERROR };

struct stream;
struct event;
struct timer;

struct ordering {
    uint64_t last_id;
    struct stream *streams;
    size_t streams_len, streams_cap;
    struct event *events;
    size_t events_len, events_cap;
    struct timer *timers;
    size_t timers_len, timers_cap;
};

void ordering_release(struct ordering *o);

bool ordering_create_stream(struct ordering *o, uint64_t *id, struct fault *f);
/* Forgets `s`. The host drains a stream before destroying it, so the events
 * recorded on it keep the state they have now. */
bool ordering_destroy_stream(struct ordering *o, uint64_t s, struct fault *f);

/* Orders the next piece of work on `s`: the next seq, carrying the waits
 * requested since the previous ticket that are still outstanding. */
bool ordering_submit(struct ordering *o, uint64_t s, struct ticket *ticket, struct fault *f);

/* Records that work `seq` on `s` ran at host time `at_ns`. A seq beyond the
 * last ticket is still recorded (the stream's next seq moves past it) but
 * refused with an invalid-argument fault, for the caller to log. */
bool ordering_complete(struct ordering *o, uint64_t s, uint64_t seq, uint64_t at_ns, bool ok, struct fault *f);

/* The next ticket on `dependent` waits for everything on `other` so far. */
bool ordering_add_dependency(struct ordering *o, uint64_t dependent, uint64_t other, struct fault *f);

/* False, with the first failure on `s` in `f`, if any work on it failed
 * (or `s` is unknown). */
bool ordering_stream_status(const struct ordering *o, uint64_t s, struct fault *f);

bool ordering_create_event(struct ordering *o, uint64_t *id, struct fault *f);
bool ordering_destroy_event(struct ordering *o, uint64_t e, struct fault *f);
/* The event fires with a marker placed after everything on `s` so far.
 * Re-recording rebinds it: waits taken earlier keep the old marker. */
bool ordering_record_event(struct ordering *o, uint64_t s, uint64_t e, struct ticket *ticket, struct fault *f);
/* The next ticket on `s` waits for the event's current marker. Waiting for
 * an event never recorded, or already fired, is a no-op. */
bool ordering_wait_event(struct ordering *o, uint64_t s, uint64_t e, struct fault *f);
enum event_state ordering_event_status(const struct ordering *o, uint64_t e);

bool ordering_create_timer(struct ordering *o, uint64_t *id, struct fault *f);
bool ordering_destroy_timer(struct ordering *o, uint64_t t, struct fault *f);
/* Places the timer's start (which also clears its stop) or stop marker after
 * everything on `s` so far. */
bool ordering_mark_timer(struct ordering *o, uint64_t s, uint64_t t, bool start, struct ticket *ticket,
                         struct fault *f);
/* Host nanoseconds between the completions of the start and stop markers,
 * once both have run. */
bool ordering_timer_elapsed(const struct ordering *o, uint64_t t, uint64_t *elapsed_ns);

#endif
