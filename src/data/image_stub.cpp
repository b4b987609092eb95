// Stand-in until the image pipeline (src/data/image) provides its datasets.
#include "data/registry.h"

namespace dtrain::data {
std::vector<DatasetEntry> image_dataset_entries() { return {}; }
}  // namespace dtrain::data
