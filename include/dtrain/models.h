#pragma once
// The model zoo: image classifiers created by name, torchvision-exact.
//
//   cnn                          the slice's small CNN (any channels, classes, size >= 4)
//   resnet18/34/50/101/152       torchvision's ResNet v1.5 (stride on the Bottleneck's 3x3 conv)
//   vgg11/13/16/19, vgg*_bn      torchvision's VGG (configurations A, B, D, E), with BatchNorm
//   efficientnet_b0 ... _b7      torchvision's EfficientNet (MBConv + squeeze-excitation, SiLU,
//                                stochastic depth in "row" mode)
//
// Every torchvision model has torchvision's submodule names, so named_parameters()/
// named_buffers() (and dtrain/weights.h's state_dict()) give model.state_dict()'s keys, in its
// order and with its shapes; its parameter count for 3 channels and 1000 classes is
// torchvision's, and it is initialised as torchvision initialises it. ModelOptions choose the
// first convolution's input channels and the classifier's outputs.
//
/// Example:
/// ```
/// void build_resnet50() {
///   dtrain::ModelOptions o;
///   o.in_channels = 3;
///   o.num_classes = 1000;
///   o.image_size = 224;
///   auto model = dtrain::make_model("resnet50", o);  // [B, 3, 224, 224] -> [B, 1000]
///   for (const auto& info : dtrain::model_infos()) std::cout << info.name << "\n";
/// }
/// ```

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dtrain/options.h"

namespace dtrain {

/// An image classifier: [B, C, H, W] float inputs to [B, num_classes] logits.
/// train()/eval() switch BatchNorm, dropout and stochastic depth as in PyTorch.
///
/// Preconditions: inputs have the in_channels of the ModelOptions it was
/// built with and are on the module's device; as with every
/// torch::nn::Module, one thread runs a forward at a time.
class ImageClassifier : public torch::nn::Module {
 public:
  virtual at::Tensor forward(at::Tensor x) = 0;
};

struct ModelOptions {
  /// Channels of the input images (the first convolution's input).
  int64_t in_channels = 1;
  /// Classifier outputs.
  int64_t num_classes = 10;
  /// Input height and width (square). `cnn` sizes its first linear layer from it; the
  /// torchvision models take any size from their minimum up (adaptive pooling) and only
  /// check it.
  int64_t image_size = 28;

  DTRAIN_SETTER(ModelOptions, in_channels)
  DTRAIN_SETTER(ModelOptions, num_classes)
  DTRAIN_SETTER(ModelOptions, image_size)
};

/// What the registry knows about a model without building it.
struct ModelInfo {
  std::string name;
  /// Parameters (not buffers) for 3 input channels and 1000 classes, torchvision's count;
  /// for `cnn`, for 3 channels, 1000 classes and its default input size.
  int64_t parameters = 0;
  /// The input size the model is designed (and torchvision's weights trained) for.
  int64_t default_image_size = 0;
  /// The smallest image_size make_model() accepts.
  int64_t min_image_size = 1;
};

/// Every model, in the order `dtrain models` lists them. Cheap: counts are computed from the
/// architectures' configurations, no model is built. Thread-safe.
std::vector<ModelInfo> model_infos();

/// One model's entry. Throws InvalidArgument for an unknown name, listing the valid ones.
ModelInfo model_info(const std::string& name);

/// Parameters of `name` for the given channels and classes (image size matters for `cnn`
/// only), computed without building it. Throws InvalidArgument like make_model().
int64_t count_parameters(const std::string& name, const ModelOptions& options);

/// Creates a model by name, initialised from the current default generator (seed it for
/// reproducible weights). Throws InvalidArgument for an unknown name (listing the valid
/// names), for non-positive options, and for an image_size below the model's minimum (naming
/// it, the --image-size flag that resizes the inputs, and the default size).
std::shared_ptr<ImageClassifier> make_model(const std::string& name, const ModelOptions& options);

/// Names make_model() accepts.
std::vector<std::string> model_names();

}  // namespace dtrain
