#pragma once
// The dataset registry behind open_dataset(): one row per --dataset name.

#include <vector>

#include "dtrain/data.h"

namespace dtrain {
class ProcessGroup;  // dtrain/comm.h
}

namespace dtrain::data {

struct DatasetEntry {
  const char* name;
  /// One line for `dtrain train --help`.
  const char* description;
  /// Opens both splits. `group`: the ranks opening it together (every one
  /// calls this), with which an S3 dataset's listings are shared (Note
  /// [Shared listing]); null when opened without a group.
  DatasetSplits (*open)(const DatasetOptions& options, const ProcessGroup* group);
};

/// Rows for the image datasets (image/registry_image.cpp): imagefolder,
/// packed, stl10, cifar10, synthetic.
std::vector<DatasetEntry> image_dataset_entries();

}  // namespace dtrain::data
