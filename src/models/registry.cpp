// The registry: names -> constructors, parameter counts and input sizes.

#include "common/strings.h"
#include "dtrain/errors.h"
#include "models/zoo.h"

namespace dtrain {
namespace {

using models::ResNetConfig;
using models::VggConfig;

struct Entry {
  const char* name;
  std::shared_ptr<ImageClassifier> (*make)(const ModelOptions&);
  int64_t (*count)(const ModelOptions&);
  int64_t default_image_size;
  int64_t min_image_size;  // torchvision's weights meta "min_size"; cnn: two 2x2 poolings
};

template <bool kBottleneck, int64_t L1, int64_t L2, int64_t L3, int64_t L4>
struct ResNet {
  static ResNetConfig config() { return {kBottleneck, {L1, L2, L3, L4}}; }
  static std::shared_ptr<ImageClassifier> make(const ModelOptions& o) {
    return models::make_resnet(config(), o);
  }
  static int64_t count(const ModelOptions& o) { return models::count_resnet(config(), o); }
};

template <char kLayout, bool kBatchNorm>
struct Vgg {
  static std::shared_ptr<ImageClassifier> make(const ModelOptions& o) {
    return models::make_vgg({kLayout, kBatchNorm}, o);
  }
  static int64_t count(const ModelOptions& o) {
    return models::count_vgg({kLayout, kBatchNorm}, o);
  }
};

template <int kVariant>
struct EfficientNet {
  static std::shared_ptr<ImageClassifier> make(const ModelOptions& o) {
    return models::make_efficientnet(kVariant, o);
  }
  static int64_t count(const ModelOptions& o) { return models::count_efficientnet(kVariant, o); }
};

#define DTRAIN_RESNET(name, ...) \
  { name, &ResNet<__VA_ARGS__>::make, &ResNet<__VA_ARGS__>::count, 224, 1 }
#define DTRAIN_VGG(name, ...) \
  { name, &Vgg<__VA_ARGS__>::make, &Vgg<__VA_ARGS__>::count, 224, 32 }
#define DTRAIN_EFFICIENTNET(variant, size)                                                        \
  {                                                                                               \
    "efficientnet_b" #variant, &EfficientNet<variant>::make, &EfficientNet<variant>::count, size, \
        1                                                                                         \
  }

// The zoo, in the order `dtrain models` and `dtrain train --help` list it.
const Entry kModels[] = {
    {"cnn", &models::make_cnn, &models::count_cnn, 28, 4},
    DTRAIN_RESNET("resnet18", false, 2, 2, 2, 2),
    DTRAIN_RESNET("resnet34", false, 3, 4, 6, 3),
    DTRAIN_RESNET("resnet50", true, 3, 4, 6, 3),
    DTRAIN_RESNET("resnet101", true, 3, 4, 23, 3),
    DTRAIN_RESNET("resnet152", true, 3, 8, 36, 3),
    DTRAIN_VGG("vgg11", 'A', false),
    DTRAIN_VGG("vgg11_bn", 'A', true),
    DTRAIN_VGG("vgg13", 'B', false),
    DTRAIN_VGG("vgg13_bn", 'B', true),
    DTRAIN_VGG("vgg16", 'D', false),
    DTRAIN_VGG("vgg16_bn", 'D', true),
    DTRAIN_VGG("vgg19", 'E', false),
    DTRAIN_VGG("vgg19_bn", 'E', true),
    DTRAIN_EFFICIENTNET(0, 224),
    DTRAIN_EFFICIENTNET(1, 240),
    DTRAIN_EFFICIENTNET(2, 260),
    DTRAIN_EFFICIENTNET(3, 300),
    DTRAIN_EFFICIENTNET(4, 380),
    DTRAIN_EFFICIENTNET(5, 456),
    DTRAIN_EFFICIENTNET(6, 528),
    DTRAIN_EFFICIENTNET(7, 600),
};

const Entry& find(const std::string& name) {
  for (const auto& e : kModels) {
    if (name == e.name) return e;
  }
  throw InvalidArgument(
      cat("unknown model '", name, "'; valid models: ", join(model_names(), ", ")));
}

// The checks make_model() and count_parameters() share.
const Entry& checked(const std::string& name, const ModelOptions& o) {
  const Entry& e = find(name);
  if (o.in_channels < 1 || o.num_classes < 1 || o.image_size < 1) {
    throw InvalidArgument(cat("model '", name, "': in_channels (", o.in_channels,
                              "), num_classes (", o.num_classes, ") and image_size (", o.image_size,
                              ") must be positive"));
  }
  if (o.image_size < e.min_image_size) {
    throw InvalidArgument(cat("model '", name, "' needs images of at least ", e.min_image_size, "x",
                              e.min_image_size, ", got ", o.image_size, "x", o.image_size,
                              "; resize them to at least that, e.g. with "
                              "DatasetOptions::image_size ",
                              e.min_image_size,
                              " (every dataset honours it), or to the model's default ",
                              e.default_image_size));
  }
  return e;
}

ModelInfo info_of(const Entry& e) {
  ModelOptions reference;
  reference.in_channels = 3;
  reference.num_classes = 1000;
  reference.image_size = e.default_image_size;
  return {e.name, e.count(reference), e.default_image_size, e.min_image_size};
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& e : kModels) names.emplace_back(e.name);
  return names;
}

std::vector<ModelInfo> model_infos() {
  std::vector<ModelInfo> out;
  for (const auto& e : kModels) out.push_back(info_of(e));
  return out;
}

ModelInfo model_info(const std::string& name) { return info_of(find(name)); }

int64_t count_parameters(const std::string& name, const ModelOptions& options) {
  return checked(name, options).count(options);
}

std::shared_ptr<ImageClassifier> make_model(const std::string& name, const ModelOptions& options) {
  return checked(name, options).make(options);
}

}  // namespace dtrain
