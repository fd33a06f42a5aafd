// What the KV transfer bench sets its framed figures against, over the
// same bytes in the same round: raw TCP on loopback (no frames, no CRC, no
// decoding), CRC32C alone, and one core's AES-128-GCM as TLS seals them.
#ifndef KVCANARY_BENCH_KV_TRANSFER_BASELINES_H_
#define KVCANARY_BENCH_KV_TRANSFER_BASELINES_H_

#include "bench/kv_transfer_plan.h"

namespace kvcanary::engine::bench {

// The same bytes as every transfer's page frames, unframed: one bulk send
// over plain TCP, read in 256 KiB reads, no CRC, no decoding. MB/s of the
// K/V they hold, so that it compares with the framed figures. With
// `poll_first`, reads poll before they sleep, as the KV sockets wait.
Figure RawFigure(const Plan& plan, bool poll_first);

// CRC32C over every transfer's page frames, in GB/s.
double CrcGBps(const Plan& plan);

// One core's AES-128-GCM rate over the same bytes, in MB/s, as a TLS 1.3
// sender seals them: records of 16 KiB, each with its own IV and tag
// (OpenSSL's EVP, so AES-NI and carry-less multiply where the CPU has
// them). What mutual TLS costs per byte at least, on each side.
double AesGcmMBps(const Plan& plan);

}  // namespace kvcanary::engine::bench

#endif  // KVCANARY_BENCH_KV_TRANSFER_BASELINES_H_
