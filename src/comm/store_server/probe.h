#pragma once
// Which TCPStore dialect a store server speaks, asked in a few seconds before
// c10d's client connects: c10d's clients meet a server of the other dialect
// with silence or a dropped connection and retry for their whole timeout
// (30 minutes in PyTorch), so dtrain asks first and names the mismatch.
// Torch-free.

#include <chrono>
#include <string>

#include "comm/store_server/wire.h"

namespace dtrain::store_server {

struct ProbeResult {
  /// False when nothing accepted a connection at host:port before the
  /// connect deadline (`error` says why).
  bool connected = false;
  /// What answered: kLegacy, kValidate, or kUnknown (connected, but neither
  /// dialect answered within the answer timeout). dtrain's own server answers
  /// whichever dialect is asked first.
  Dialect dialect = Dialect::kUnknown;
  std::string error;
};

/// Connects to host:port (retrying refused connections until
/// `connect_timeout`) and asks in `preferred` first, then in the other
/// dialect: legacy asks GETNUMKEYS, validate sends VALIDATE and PING. Both
/// questions are harmless to either server: a legacy server reads the
/// validate greeting as a SET whose key length exceeds what a vector can
/// hold and drops that connection without allocating. Each answer is awaited
/// at most `answer_timeout`.
ProbeResult probe_store(const std::string& host, int port, Dialect preferred,
                        std::chrono::milliseconds connect_timeout,
                        std::chrono::milliseconds answer_timeout);

}  // namespace dtrain::store_server
