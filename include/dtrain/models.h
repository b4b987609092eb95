#pragma once
// The model zoo: image classifiers created by name.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace dtrain {

/// An image classifier: [B, C, H, W] float inputs to [B, num_classes] logits.
class ImageClassifier : public torch::nn::Module {
 public:
  virtual at::Tensor forward(at::Tensor x) = 0;
};

struct ModelOptions {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  /// Input height and width (square); models that need it size layers from it.
  int64_t image_size = 28;
};

/// Creates a model by name. Throws InvalidArgument for an unknown name, with
/// the list of valid names, or for options the model cannot take.
std::shared_ptr<ImageClassifier> make_model(const std::string& name, const ModelOptions& options);

/// Names make_model() accepts.
std::vector<std::string> model_names();

}  // namespace dtrain
