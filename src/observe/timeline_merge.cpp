// `dtrain timeline merge`: per-rank traces into one. See dtrain/timeline.h.
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/timeline.h"

namespace dtrain {
namespace {

// A rank's trace. A rank that died leaves a file without its closing
// bracket (and maybe a trailing comma or a cut-off event): such a file is
// read up to its last complete event.
nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(cat("timeline '", path, "' cannot be opened; check the path"));
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  nlohmann::json trace = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    // Writers end every event but the last with ",\n": close after the last
    // event, or, if that one was cut off mid-write, after the one before.
    std::string head = text;
    while (!head.empty() &&
           (std::isspace(static_cast<unsigned char>(head.back())) || head.back() == ',')) {
      head.pop_back();
    }
    trace = nlohmann::json::parse(head + "\n]", nullptr, false);
    const size_t cut = text.rfind("},\n");
    if (trace.is_discarded() && cut != std::string::npos) {
      trace = nlohmann::json::parse(text.substr(0, cut + 1) + "\n]", nullptr, false);
    }
  }
  if (trace.is_object() && trace.contains("traceEvents")) trace = trace["traceEvents"];
  if (trace.is_discarded() || !trace.is_array()) {
    throw InvalidArgument(cat("timeline '", path,
                              "' is not a Chrome trace (a JSON array of events); pass the files "
                              "a Timeline wrote (dtrain/timeline.h)"));
  }
  return trace;
}

int rank_of(const nlohmann::json& events, const std::string& path) {
  for (const auto& e : events) {
    if (e.is_object() && e.contains("pid") && e["pid"].is_number_integer())
      return e["pid"].get<int>();
  }
  throw InvalidArgument(cat("timeline '", path, "' holds no event with a pid (rank)"));
}

}  // namespace

size_t merge_timelines(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) throw InvalidArgument("timeline merge: no input files; pass one per rank");
  std::map<int, std::string> file_of_rank;
  nlohmann::json merged = nlohmann::json::array();
  for (const std::string& path : inputs) {
    nlohmann::json events = read_trace(path);
    const int rank = rank_of(events, path);
    auto [it, fresh] = file_of_rank.emplace(rank, path);
    if (!fresh) {
      throw InvalidArgument(cat("timeline merge: '", it->second, "' and '", path,
                                "' are both rank ", rank, "; pass one file per rank"));
    }
    for (auto& e : events) merged.push_back(std::move(e));
  }
  std::ofstream out(output);
  out << "[\n";
  for (size_t i = 0; i < merged.size(); ++i) out << (i ? ",\n" : "") << merged[i].dump();
  out << "\n]\n";
  out.close();
  if (!out) throw Error(cat("timeline merge: cannot write '", output, "'; check the directory"));
  return merged.size();
}

}  // namespace dtrain
