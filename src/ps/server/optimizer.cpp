// OptimizerSpec's text form: "sgd lr=0.1 momentum=0.9 wd=0.0001 rescale_grad=1".
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace dtrain {

std::string OptimizerSpec::serialize() const {
  std::ostringstream out;
  out << std::setprecision(17) << name << " lr=" << learning_rate << " momentum=" << momentum
      << " wd=" << weight_decay << " rescale_grad=" << rescale_grad;
  return out.str();
}

OptimizerSpec OptimizerSpec::parse(std::string_view text) {
  OptimizerSpec spec;
  std::vector<std::string> words;
  for (auto& w : split(text, ' ')) {
    if (!w.empty()) words.push_back(w);
  }
  if (words.empty())
    throw InvalidArgument("empty optimizer spec; expected e.g. 'sgd lr=0.1 momentum=0.9'");
  if (words[0] != "sgd") {
    throw InvalidArgument(cat("unknown optimizer '", words[0], "' in '", text,
                              "'; the servers run 'sgd' (with momentum and wd)"));
  }
  for (size_t i = 1; i < words.size(); ++i) {
    const auto eq = words[i].find('=');
    double v = 0;
    if (eq == std::string::npos || !parse_double(words[i].substr(eq + 1), &v) ||
        !std::isfinite(v)) {
      throw InvalidArgument(cat("optimizer spec field '", words[i], "' is not name=number"));
    }
    const std::string field = words[i].substr(0, eq);
    if (field == "lr") {
      spec.learning_rate = v;
    } else if (field == "momentum") {
      spec.momentum = v;
    } else if (field == "wd") {
      spec.weight_decay = v;
    } else if (field == "rescale_grad") {
      spec.rescale_grad = v;
    } else {
      throw InvalidArgument(
          cat("unknown optimizer spec field '", field, "'; known: lr, momentum, wd, rescale_grad"));
    }
  }
  return spec;
}

}  // namespace dtrain
