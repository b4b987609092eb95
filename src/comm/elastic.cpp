// Worker error files (dtrain/elastic.h): the worker side of torchelastic's
// TORCHELASTIC_ERROR_FILE contract. The format lives in common/error_file.
#include "dtrain/elastic.h"

#include <cxxabi.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <typeinfo>

#include "common/error_file.h"
#include "common/net.h"
#include "common/strings.h"
#include "dtrain/comm.h"

namespace dtrain {
namespace {

// "dtrain::TimeoutError" rather than "N6dtrain12TimeoutErrorE": the type is
// what tells a reader of the launcher's summary a timeout from a bad input.
std::string type_name(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? demangled.get() : mangled;
}

}  // namespace

bool record_error(const std::exception& e, const ErrorFileOptions& options) {
  if (options.path.empty()) return false;
  try {
    detail::ErrorRecord r;
    r.message = e.what();
    r.error_type = type_name(e);
    r.rank = options.rank;
    r.local_rank = options.local_rank;
    r.host = detail::host_name();
    r.pid = static_cast<int>(::getpid());
    r.timestamp =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return detail::write_error_file(options.path, r);
  } catch (...) {
    return false;  // bad_alloc while failing: the exit code still tells
  }
}

bool record_error(const std::exception& e) {
  try {
    return record_error(e, resolve_error_file(process_env()));
  } catch (...) {
    return false;
  }
}

int run_with_error_file(const std::function<int()>& main_fn) {
  try {
    return main_fn();
  } catch (const std::exception& e) {
    record_error(e);
    std::cerr << "error: " << first_line(e.what()) << std::endl;
    return 1;
  }
}

}  // namespace dtrain
