#pragma once
// ImageFolder scanning, shared by the folder source and the packer so both
// see the same samples in the same order.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain {
class ImageSource;  // dtrain/image.h
}

namespace dtrain::image {

/// The samples of one ImageFolder split, in torchvision's order.
struct FolderIndex {
  std::string root;
  std::vector<std::string> classes;
  /// Paths relative to root, e.g. "n01440764/n01440764_10026.JPEG".
  std::vector<std::string> files;
  std::vector<int32_t> labels;
  /// S3: each file's ETag from the listing (reads send If-Match); empty locally.
  std::vector<std::string> etags;
  /// S3: each file's size from the listing; empty locally (the fingerprint
  /// stats the files when it is asked for, not every open).
  std::vector<int64_t> sizes;
};

/// True for .jpg, .jpeg and .png in any case.
bool has_image_extension(const std::string& name);

/// Label of `name` in `classes`, or -1.
int32_t class_index(const std::vector<std::string>& classes, const std::string& name);

class Storage;  // data/image/location.h

/// Scans `root`, a local directory or an s3:// prefix (see open_image_folder
/// in dtrain/image.h for the rules).
FolderIndex scan_image_folder(Storage& storage, const std::string& root,
                              const std::vector<std::string>& class_names);

/// open_image_folder (dtrain/image.h) through `storage`: the registry's
/// Storage, shared with the group while datasets open (Note [Shared listing]).
std::shared_ptr<ImageSource> open_image_folder(std::shared_ptr<Storage> storage,
                                               const std::string& root,
                                               const std::vector<std::string>& class_names);

}  // namespace dtrain::image
