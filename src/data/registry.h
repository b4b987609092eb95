#pragma once
// The dataset registry behind open_dataset(): one row per --dataset name.

#include <vector>

#include "dtrain/data.h"

namespace dtrain::data {

struct DatasetEntry {
  const char* name;
  /// One line for `dtrain train --help`.
  const char* description;
  DatasetSplits (*open)(const DatasetOptions& options);
};

/// Rows for the image datasets (image/registry_image.cpp): imagefolder,
/// packed, stl10, cifar10, synthetic.
std::vector<DatasetEntry> image_dataset_entries();

}  // namespace dtrain::data
