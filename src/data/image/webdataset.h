#pragma once
// WebDataset tar shards (`--dataset webdataset`): the index of one shard's
// samples, shared by the ImageSource (open_webdataset in dtrain/image.h) and
// the tar reader's fuzz target.
//
// Note [WebDataset samples]
// As the webdataset library groups them: a member "dir/name.ext1.ext2" has
// the key "dir/name" (up to the first dot of the last path component) and
// the extension "ext1.ext2"; consecutive members with one key form a sample.
// dtrain takes the sample's image from its jpg/jpeg/png member (any case)
// and its label from the cls member (a decimal integer, surrounding
// whitespace allowed); other members (json, txt, ...) are ignored. A sample
// without an image or a cls member, or with a label that is not an integer
// in [0, 2^20), is a DataError naming the shard, the member's offset and
// the key. Directory entries and names starting with "__" are skipped.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image/io.h"

namespace dtrain {
class ImageSource;  // dtrain/image.h
}

namespace dtrain::image {

/// One sample: where its image's bytes are in the shard, and its label.
struct WebDatasetSample {
  std::string key;
  int64_t offset = 0;  // of the image member's data
  int64_t size = 0;
  int64_t label = 0;
};

/// The samples of one shard, in member order (Note [WebDataset samples]).
/// Reads the tar headers and the cls members only. Throws DataError naming
/// the shard and the offset for corrupt tar data or a malformed sample.
std::vector<WebDatasetSample> index_webdataset_shard(const ByteSource& shard);

class Storage;  // data/image/location.h

/// open_webdataset (dtrain/image.h) through `storage`: the registry's
/// Storage, shared with the group while datasets open, so that rank 0
/// indexes each shard in S3 for every rank (Note [Shared listing]).
std::shared_ptr<ImageSource> open_webdataset(std::shared_ptr<Storage> storage,
                                             const std::vector<std::string>& shards,
                                             const std::vector<std::string>& class_names);

}  // namespace dtrain::image
