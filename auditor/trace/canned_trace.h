// The incident in miniature, as an engine node streams it (kvt1): tenant 2's
// page freed unscrubbed and read by tenant 1. The trace detector's positive
// control streams it; tests stream it to prove a trace finding.

#ifndef KVCANARY_AUDITOR_TRACE_CANNED_TRACE_H_
#define KVCANARY_AUDITOR_TRACE_CANNED_TRACE_H_

namespace kvcanary::auditor {

inline constexpr char kCannedForeignRead[] =
    "kvt1 page_alloc seq=1 ts_us=10 node=decode page=1 gen=1 tenant=2 "
    "request=7\n"
    "kvt1 page_write seq=2 ts_us=11 node=decode page=1 gen=1 tenant=2 "
    "request=7 first_slot=0 last_slot_exclusive=16 writer_gen=1\n"
    "kvt1 page_free seq=3 ts_us=12 node=decode page=1 gen=1 tenant=2 "
    "request=7 scrub=none\n"
    "kvt1 page_alloc seq=4 ts_us=13 node=decode page=1 gen=2 tenant=1 "
    "request=8\n"
    "kvt1 page_read seq=5 ts_us=14 node=decode request=8 tenant=1 page=1 "
    "gen=2 slots=16\n";

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TRACE_CANNED_TRACE_H_
