#include "ordering.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct stream {
    uint64_t id; /* first: see find_id */
    /* Seq of the latest ticket; 0 before the first. */
    uint64_t submitted;
    /* Highest seq reported complete (completions arrive in seq order). */
    uint64_t completed;
    /* The first work that failed, if any. */
    bool failed;
    uint64_t failed_seq;
    /* Waits the next ticket must carry, at most one per stream: a later seq
     * on a stream implies the earlier ones. */
    struct dep *waits;
    size_t waits_len, waits_cap;
};

enum binding {
    /* Created, never recorded. */
    BINDING_UNRECORDED,
    /* Fires when `marker` completes. */
    BINDING_MARKER,
    /* Its stream was destroyed; `settled` is final. */
    BINDING_SETTLED,
};

struct event {
    uint64_t id; /* first: see find_id */
    enum binding binding;
    struct dep marker;
    enum event_state settled;
};

enum mark_kind { MARK_UNSET, MARK_PENDING, MARK_AT };

struct timer_mark {
    enum mark_kind kind;
    /* MARK_PENDING: the marker to wait for. */
    struct dep marker;
    /* MARK_AT: host time at which the marker completed. */
    uint64_t at_ns;
};

struct timer {
    uint64_t id; /* first: see find_id */
    struct timer_mark start, stop;
};

/* Index of the item with `id` in `items` (`len` items of `size` bytes, each
 * starting with its id, sorted by it), or SIZE_MAX. One search serves the
 * three kinds of handle. */
static size_t find_id(const void *items, size_t len, size_t size, uint64_t id) {
    const unsigned char *base = items;
    size_t lo = 0, hi = len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at;
        memcpy(&at, base + mid * size, sizeof at);
        if (at == id) {
            return mid;
        }
        if (at < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return SIZE_MAX;
}

static void remove_item(void *items, size_t *len, size_t size, size_t at) {
    unsigned char *base = items;
    memmove(base + at * size, base + (at + 1) * size, (*len - at - 1) * size);
    --*len;
}

static struct stream *find_stream(const struct ordering *o, uint64_t s) {
    size_t i = find_id(o->streams, o->streams_len, sizeof *o->streams, s);
    return i == SIZE_MAX ? NULL : &o->streams[i];
}

static struct event *find_event(const struct ordering *o, uint64_t e) {
    size_t i = find_id(o->events, o->events_len, sizeof *o->events, e);
    return i == SIZE_MAX ? NULL : &o->events[i];
}

static struct timer *find_timer(const struct ordering *o, uint64_t t) {
    size_t i = find_id(o->timers, o->timers_len, sizeof *o->timers, t);
    return i == SIZE_MAX ? NULL : &o->timers[i];
}

static bool unknown(struct fault *f, uint64_t id) {
    return fail(f, FAULT_UNKNOWN_HANDLE, id, "unknown handle %" PRIu64, id);
}

static bool heap_exhausted(struct fault *f) {
    return fail(f, FAULT_INTERNAL, 0, "the guest's own heap is exhausted");
}

/* True while `dep` names work that has not completed. Work on a destroyed
 * stream has completed: the host drains a stream first. */
static bool outstanding(const struct ordering *o, struct dep dep) {
    const struct stream *s = find_stream(o, dep.stream);
    return s != NULL && s->completed < dep.seq;
}

/* State of an event whose marker is `seq` on `s`. */
static enum event_state marker_state(const struct stream *s, uint64_t seq) {
    if (s->completed < seq) {
        /* Even if earlier work failed: the host reports a marker's state
         * only once it ran, and the two views must agree. */
        return EVENT_PENDING;
    }
    return s->failed && s->failed_seq <= seq ? EVENT_ERROR : EVENT_COMPLETE;
}

static bool wait_for(struct stream *s, struct dep dep, struct fault *f) {
    for (size_t i = 0; i < s->waits_len; i++) {
        if (s->waits[i].stream == dep.stream) {
            if (dep.seq > s->waits[i].seq) {
                s->waits[i].seq = dep.seq;
            }
            return true;
        }
    }
    if (!reserve(&s->waits, &s->waits_cap, s->waits_len + 1, sizeof *s->waits)) {
        return heap_exhausted(f);
    }
    s->waits[s->waits_len++] = dep;
    return true;
}

static uint64_t fresh_id(struct ordering *o) {
    return ++o->last_id;
}

void ordering_release(struct ordering *o) {
    for (size_t i = 0; i < o->streams_len; i++) {
        free(o->streams[i].waits);
    }
    free(o->streams);
    free(o->events);
    free(o->timers);
    *o = (struct ordering){0};
}

bool ordering_create_stream(struct ordering *o, uint64_t *id, struct fault *f) {
    if (!reserve(&o->streams, &o->streams_cap, o->streams_len + 1, sizeof *o->streams)) {
        return heap_exhausted(f);
    }
    *id = fresh_id(o);
    o->streams[o->streams_len++] = (struct stream){.id = *id};
    return true;
}

bool ordering_destroy_stream(struct ordering *o, uint64_t s, struct fault *f) {
    size_t i = find_id(o->streams, o->streams_len, sizeof *o->streams, s);
    if (i == SIZE_MAX) {
        return unknown(f, s);
    }
    struct stream *stream = &o->streams[i];
    for (size_t e = 0; e < o->events_len; e++) {
        struct event *event = &o->events[e];
        if (event->binding == BINDING_MARKER && event->marker.stream == s) {
            enum event_state state = marker_state(stream, event->marker.seq);
            /* Nothing will ever complete it now: failing is better than
             * leaving TensorFlow polling forever. */
            event->settled = state == EVENT_PENDING ? EVENT_ERROR : state;
            event->binding = BINDING_SETTLED;
        }
    }
    /* A timer marker on `s` stays pending: no completion can name `s` now. */
    free(stream->waits);
    remove_item(o->streams, &o->streams_len, sizeof *o->streams, i);
    return true;
}

bool ordering_submit(struct ordering *o, uint64_t s, struct ticket *ticket, struct fault *f) {
    struct stream *stream = find_stream(o, s);
    if (stream == NULL) {
        return unknown(f, s);
    }
    /* The waits move into the ticket. Satisfied ones are dropped: a shorter
     * ticket is cheaper for the host, and equally safe. */
    struct dep *after = stream->waits;
    size_t kept = 0;
    for (size_t i = 0; i < stream->waits_len; i++) {
        if (outstanding(o, after[i])) {
            after[kept++] = after[i];
        }
    }
    if (kept == 0) {
        free(after);
        after = NULL;
    }
    stream->waits = NULL;
    stream->waits_len = stream->waits_cap = 0;
    *ticket = (struct ticket){.seq = ++stream->submitted, .after = after, .after_len = kept};
    return true;
}

bool ordering_complete(struct ordering *o, uint64_t s, uint64_t seq, uint64_t at_ns, bool ok, struct fault *f) {
    struct stream *stream = find_stream(o, s);
    if (stream == NULL) {
        return unknown(f, s);
    }
    bool never_submitted = seq > stream->submitted;
    if (seq > stream->submitted) {
        stream->submitted = seq;
    }
    if (seq > stream->completed) {
        stream->completed = seq;
    }
    if (!ok && !stream->failed) {
        stream->failed = true;
        stream->failed_seq = seq;
    }
    /* A scan, not an index: TensorFlow keeps a handful of timers at most. */
    for (size_t i = 0; i < o->timers_len; i++) {
        struct timer_mark *marks[] = {&o->timers[i].start, &o->timers[i].stop};
        for (size_t m = 0; m < 2; m++) {
            if (marks[m]->kind == MARK_PENDING && marks[m]->marker.stream == s && marks[m]->marker.seq == seq) {
                *marks[m] = (struct timer_mark){.kind = MARK_AT, .at_ns = at_ns};
            }
        }
    }
    if (never_submitted) {
        return fail(f, FAULT_INVALID_ARGUMENT, 0,
                    "completion of seq %" PRIu64 " on stream %" PRIu64 ", which was never submitted", seq, s);
    }
    return true;
}

bool ordering_add_dependency(struct ordering *o, uint64_t dependent, uint64_t other, struct fault *f) {
    const struct stream *target = find_stream(o, other);
    if (target == NULL) {
        return unknown(f, other);
    }
    struct dep dep = {other, target->submitted};
    struct stream *stream = find_stream(o, dependent);
    if (stream == NULL) {
        return unknown(f, dependent);
    }
    /* A stream already runs in order after its own work. */
    if (dependent != other && outstanding(o, dep)) {
        return wait_for(stream, dep, f);
    }
    return true;
}

bool ordering_stream_status(const struct ordering *o, uint64_t s, struct fault *f) {
    const struct stream *stream = find_stream(o, s);
    if (stream == NULL) {
        return unknown(f, s);
    }
    if (stream->failed) {
        return fail(f, FAULT_INTERNAL, 0, "work %" PRIu64 " on stream %" PRIu64 " failed", stream->failed_seq, s);
    }
    return true;
}

bool ordering_create_event(struct ordering *o, uint64_t *id, struct fault *f) {
    if (!reserve(&o->events, &o->events_cap, o->events_len + 1, sizeof *o->events)) {
        return heap_exhausted(f);
    }
    *id = fresh_id(o);
    o->events[o->events_len++] = (struct event){.id = *id, .binding = BINDING_UNRECORDED};
    return true;
}

bool ordering_destroy_event(struct ordering *o, uint64_t e, struct fault *f) {
    size_t i = find_id(o->events, o->events_len, sizeof *o->events, e);
    if (i == SIZE_MAX) {
        return unknown(f, e);
    }
    remove_item(o->events, &o->events_len, sizeof *o->events, i);
    return true;
}

bool ordering_record_event(struct ordering *o, uint64_t s, uint64_t e, struct ticket *ticket, struct fault *f) {
    struct event *event = find_event(o, e);
    if (event == NULL) {
        return unknown(f, e);
    }
    if (!ordering_submit(o, s, ticket, f)) {
        return false;
    }
    event->binding = BINDING_MARKER;
    event->marker = (struct dep){s, ticket->seq};
    return true;
}

bool ordering_wait_event(struct ordering *o, uint64_t s, uint64_t e, struct fault *f) {
    const struct event *event = find_event(o, e);
    if (event == NULL) {
        return unknown(f, e);
    }
    struct stream *stream = find_stream(o, s);
    if (stream == NULL) {
        return unknown(f, s);
    }
    if (event->binding == BINDING_MARKER && event->marker.stream != s && outstanding(o, event->marker)) {
        return wait_for(stream, event->marker, f);
    }
    return true;
}

enum event_state ordering_event_status(const struct ordering *o, uint64_t e) {
    const struct event *event = find_event(o, e);
    if (event == NULL) {
        return EVENT_UNKNOWN;
    }
    switch (event->binding) {
    case BINDING_SETTLED:
        return event->settled;
    case BINDING_MARKER: {
        const struct stream *stream = find_stream(o, event->marker.stream);
        return stream == NULL ? EVENT_UNKNOWN : marker_state(stream, event->marker.seq);
    }
    default:
        return EVENT_UNKNOWN;
    }
}

bool ordering_create_timer(struct ordering *o, uint64_t *id, struct fault *f) {
    if (!reserve(&o->timers, &o->timers_cap, o->timers_len + 1, sizeof *o->timers)) {
        return heap_exhausted(f);
    }
    *id = fresh_id(o);
    o->timers[o->timers_len++] = (struct timer){.id = *id};
    return true;
}

bool ordering_destroy_timer(struct ordering *o, uint64_t t, struct fault *f) {
    size_t i = find_id(o->timers, o->timers_len, sizeof *o->timers, t);
    if (i == SIZE_MAX) {
        return unknown(f, t);
    }
    remove_item(o->timers, &o->timers_len, sizeof *o->timers, i);
    return true;
}

bool ordering_mark_timer(struct ordering *o, uint64_t s, uint64_t t, bool start, struct ticket *ticket,
                         struct fault *f) {
    struct timer *timer = find_timer(o, t);
    if (timer == NULL) {
        return unknown(f, t);
    }
    if (!ordering_submit(o, s, ticket, f)) {
        return false;
    }
    struct timer_mark mark = {.kind = MARK_PENDING, .marker = {s, ticket->seq}};
    if (start) {
        timer->start = mark;
        timer->stop = (struct timer_mark){.kind = MARK_UNSET};
    } else {
        timer->stop = mark;
    }
    return true;
}

bool ordering_timer_elapsed(const struct ordering *o, uint64_t t, uint64_t *elapsed_ns) {
    const struct timer *timer = find_timer(o, t);
    if (timer == NULL || timer->start.kind != MARK_AT || timer->stop.kind != MARK_AT) {
        return false;
    }
    uint64_t start = timer->start.at_ns, stop = timer->stop.at_ns;
    *elapsed_ns = stop > start ? stop - start : 0;
    return true;
}
