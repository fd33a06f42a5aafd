// The framed figures of the KV transfer bench: whole transfers of a Plan
// through KvSender and KvReceiver on loopback (the decode side in memory,
// its port run through KvGate as DecodeNode runs it), plain or over mutual
// TLS, sessions kept or a connection per transfer.
#ifndef KVCANARY_BENCH_KV_TRANSFER_FRAMED_H_
#define KVCANARY_BENCH_KV_TRANSFER_FRAMED_H_

#include <memory>

#include "bench/kv_transfer_plan.h"
#include "common/tls.h"

namespace kvcanary::engine::bench {

// Every transfer of `plan` through KvSender -> KvReceiver (over mutual TLS
// when `tls` is set): Hello and Auth once per session, then for each
// transfer Metadata with the transfer token, the pages, Commit, the Ack.
// `sessions`: the sender keeps its session between transfers (as the
// prefill node does); otherwise every transfer opens a connection of its
// own, handshake included. Timed from the first connect to the last Ack.
Figure FramedFigure(Plan& plan, const tls::Context* tls, bool sessions);

// Mutual TLS as `up --tls` sets it up, in a temporary directory; null if
// it could not be.
std::shared_ptr<const tls::Context> BenchTls();

}  // namespace kvcanary::engine::bench

#endif  // KVCANARY_BENCH_KV_TRANSFER_FRAMED_H_
