#pragma once
// dtrain's error vocabulary. Library code throws these; only the CLI turns
// them into exit codes. Messages name the rank, peer, key, file or flag and,
// where one exists, the fix.
//
//   Error                      base of everything dtrain throws
//   ├── InvalidArgument        the caller's mistake: bad option, flag or env var
//   ├── DataError              missing, truncated or corrupt input data
//   └── DistError              a failure of the distributed runtime
//       ├── TimeoutError       an operation did not complete in its deadline
//       ├── PeerLostError      a peer (rank, node, store) went away
//       └── StoreError         the key/value store failed (connect, bind, key)

#include <stdexcept>
#include <string>

namespace dtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class DataError : public Error {
 public:
  using Error::Error;
};

class DistError : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public DistError {
 public:
  using DistError::DistError;
};

class PeerLostError : public DistError {
 public:
  using DistError::DistError;
};

class StoreError : public DistError {
 public:
  using DistError::DistError;
};

}  // namespace dtrain
