#pragma once
// Constructors of the model zoo; the registry (registry.cpp) maps names to them.

#include "dtrain/models.h"

namespace dtrain::models {

/// The slice's CNN: conv(C->32, 5x5, pad 2)-ReLU-maxpool 2 -> conv(32->64, 5x5,
/// pad 2)-ReLU-maxpool 2 -> linear(64*(S/4)^2 -> 128)-ReLU -> linear(128->K).
std::shared_ptr<ImageClassifier> make_cnn(const ModelOptions& options);

/// torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]), any input size and
/// class count; adaptive average pooling before the classifier.
std::shared_ptr<ImageClassifier> make_resnet18(const ModelOptions& options);

}  // namespace dtrain::models
