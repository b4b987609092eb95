#include <functional>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "models/zoo.h"

namespace dtrain {
namespace {

struct Entry {
  const char* name;
  std::shared_ptr<ImageClassifier> (*make)(const ModelOptions&);
};

// The zoo, in the order `dtrain train --help` lists it.
constexpr Entry kModels[] = {
    {"cnn", &models::make_cnn},
    {"resnet18", &models::make_resnet18},
};

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& e : kModels) names.emplace_back(e.name);
  return names;
}

std::shared_ptr<ImageClassifier> make_model(const std::string& name, const ModelOptions& options) {
  if (options.in_channels < 1 || options.num_classes < 1 || options.image_size < 1) {
    throw InvalidArgument(cat("model '", name, "': in_channels (", options.in_channels,
                              "), num_classes (", options.num_classes, ") and image_size (",
                              options.image_size, ") must be positive"));
  }
  for (const auto& e : kModels) {
    if (name == e.name) return e.make(options);
  }
  throw InvalidArgument(
      cat("unknown model '", name, "'; valid models: ", join(model_names(), ", ")));
}

}  // namespace dtrain
