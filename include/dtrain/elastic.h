#pragma once
// Worker error files: how a failing worker tells its launcher why it failed.
//
// A launcher (dtrain run, torchrun) gives each worker a path in
// TORCHELASTIC_ERROR_FILE; a worker that dies of an exception writes a JSON
// record there (message, exception type, rank, host, pid, time), and the
// launcher reports the first failure by that record instead of "exit code 1".
// This is what Python's @record decorator does for torchrun workers; the
// file is in torchelastic's format, so torchrun reads dtrain workers' files.
// Without TORCHELASTIC_ERROR_FILE nothing is written.
//
// In a training program's main:
/// Example:
/// ```
/// int main_of_a_worker() {  // int main(int argc, char** argv)
///   return dtrain::run_with_error_file([&] {
///     dtrain::ProcessGroup pg = dtrain::init_process_group();
///     // ... train ...
///     return 0;
///   });
/// }
/// ```
// or, with a catch block of one's own:
/// Example:
/// ```
/// void step_recording_errors() {
///   try {
///     // ... train ...
///   } catch (const std::exception& e) {
///     dtrain::record_error(e);
///     throw;
///   }
/// }
/// ```

#include <exception>
#include <functional>
#include <string>

namespace dtrain {

/// Where and as whom a worker records its failure. resolve_error_file()
/// (dtrain/comm.h) fills it from TORCHELASTIC_ERROR_FILE, RANK and LOCAL_RANK.
struct ErrorFileOptions {
  /// The error file; empty: record nothing.
  std::string path;
  /// The worker's global and local rank; -1 when unknown.
  int rank = -1;
  int local_rank = -1;
};

/// Writes `e` (its what() and demangled dynamic type, e.g.
/// "dtrain::TimeoutError") with this process's host, pid and the current time
/// to options.path, replacing any earlier record. Returns whether a record was
/// written: false when the path is empty or cannot be written. Never throws,
/// so it is safe in a catch block. Thread-safe (the write is an atomic rename).
bool record_error(const std::exception& e, const ErrorFileOptions& options);

/// record_error(e, resolve_error_file(process_env())).
bool record_error(const std::exception& e);

/// Runs main_fn and returns its result. When it throws a std::exception, the
/// error is recorded (record_error), printed to stderr as
/// "error: <first line of what()>", and 1 is returned — the exit code of a
/// failed worker. Other exceptions propagate unchanged. A parameter-server
/// program, whose scheduler and server processes end with status 0 where
/// KVStore::create returned RoleServed, uses the overload in
/// dtrain/kvstore_torch.h that does that itself.
int run_with_error_file(const std::function<int()>& main_fn);

}  // namespace dtrain
