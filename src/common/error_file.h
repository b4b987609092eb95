#pragma once
// Error files: the JSON record a failing worker leaves at TORCHELASTIC_ERROR_FILE
// so that its launcher can say why it failed (torchelastic's ErrorHandler
// contract). Written by the worker (dtrain/elastic.h, the dtrain CLI), read by
// the launcher. Torch-free.

#include <optional>
#include <string>

namespace dtrain::detail {

/// One worker failure.
struct ErrorRecord {
  std::string message;     // the exception's what()
  std::string error_type;  // e.g. "dtrain::TimeoutError" or "std::runtime_error"; may be empty
  int rank = -1;           // RANK of the worker, -1 unknown
  int local_rank = -1;
  std::string host;  // gethostname()
  int pid = 0;
  double timestamp = 0;  // seconds since the epoch
};

/// torchelastic's format so torchrun's tooling reads it too:
///   {"message": {"message": "<type>: <msg>",
///                "extraInfo": {"py_callstack": "", "timestamp": "<int secs>"}},
///    "dtrain": {"rank": .., "local_rank": .., "host": .., "pid": ..,
///               "error_type": .., "message": .., "timestamp": ..}}
/// "<type>: " is left out when error_type is empty. torchrun's agent reads
/// only "message" (and copies the whole object into its own error file);
/// dtrain's launcher reads the "dtrain" object, which keeps every field typed.
std::string to_json(const ErrorRecord& record);

/// Writes to_json(record) to `path` atomically (a temporary file in the same
/// directory, then rename), creating missing parent directories. Never
/// throws: returns false when the file could not be written, because it is
/// called while the process is already failing.
bool write_error_file(const std::string& path, const ErrorRecord& record);

/// Reads a record written by write_error_file, or by torchrun's workers
/// (then only "message" and the timestamp are known: message is torch's
/// "<Type>: <msg>" text, error_type is empty, rank/local_rank -1). Both of
/// torchelastic's shapes are accepted: "message" as an object with
/// extraInfo.timestamp, or as a string with a top-level "timestamp".
/// nullopt when the file is absent, unreadable, not JSON, or has no message.
/// Never throws.
std::optional<ErrorRecord> read_error_file(const std::string& path);

}  // namespace dtrain::detail
