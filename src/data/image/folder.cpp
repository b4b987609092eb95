// ImageFolder: torchvision.datasets.ImageFolder's class and file order.

#include "data/image/folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <tuple>
#include <utility>

#include "common/strings.h"
#include "data/fingerprint.h"
#include "data/image/io.h"
#include "data/image/location.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace image {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> sorted_subdirectories(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  }
  if (ec) throw DataError(cat("cannot list '", root, "': ", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

// os.walk(followlinks=True) order: directories sorted by path, files by name.
std::vector<std::string> sorted_images(const std::string& root, const std::string& cls) {
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  std::error_code ec;
  const fs::path base = fs::path(root) / cls;
  fs::recursive_directory_iterator it(base, fs::directory_options::follow_directory_symlink, ec);
  for (fs::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_directory(ec) && has_image_extension(name)) {
      found.emplace_back(it->path().parent_path().lexically_relative(root).string(), name);
    }
  }
  if (ec) throw DataError(cat("cannot list '", base.string(), "': ", ec.message()));
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  files.reserve(found.size());
  for (auto& [dir, name] : found) files.push_back(dir + "/" + name);
  return files;
}

// The same order from an S3 listing: class = the first component of the key
// below root, files sorted by (directory, name) as os.walk gives them.
void scan_s3_folder(Storage& storage, const std::string& root, std::vector<std::string>* classes,
                    std::vector<std::vector<std::pair<std::string, Listed>>>* by_class) {
  std::vector<std::tuple<std::string, std::string, Listed>> found;  // (dir, name, object)
  for (Listed& o : storage.list(root)) {
    const size_t slash = o.name.find('/'), last = o.name.rfind('/');
    if (slash == std::string::npos) continue;  // a file directly under root
    const std::string cls = o.name.substr(0, slash);
    if (classes->empty() || classes->back() != cls) {
      if (std::find(classes->begin(), classes->end(), cls) == classes->end()) {
        classes->push_back(cls);
      }
    }
    if (has_image_extension(o.name)) {
      found.emplace_back(o.name.substr(0, last), o.name.substr(last + 1), std::move(o));
    }
  }
  std::sort(classes->begin(), classes->end());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  by_class->assign(classes->size(), {});
  for (auto& [dir, name, o] : found) {
    const std::string cls = dir.substr(0, dir.find('/'));
    const auto at = std::lower_bound(classes->begin(), classes->end(), cls) - classes->begin();
    (*by_class)[at].emplace_back(dir + "/" + name, std::move(o));
  }
}

}  // namespace

bool has_image_extension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

int32_t class_index(const std::vector<std::string>& classes, const std::string& name) {
  const auto it = std::find(classes.begin(), classes.end(), name);
  return it == classes.end() ? -1 : static_cast<int32_t>(it - classes.begin());
}

FolderIndex scan_image_folder(Storage& storage, const std::string& root,
                              const std::vector<std::string>& class_names) {
  const bool s3 = Storage::is_s3(root);
  std::vector<std::string> found;
  std::vector<std::vector<std::pair<std::string, Listed>>> s3_files;
  if (s3) {
    scan_s3_folder(storage, root, &found, &s3_files);
    if (found.empty()) {
      throw DataError(cat("image folder '", root,
                          "' has no objects under it; expected ROOT/<class>/<image>.jpg keys"));
    }
  } else {
    if (!is_directory(root)) {
      throw DataError(cat("image folder '", root, "' does not exist or is not a directory"));
    }
    found = sorted_subdirectories(root);
  }
  FolderIndex index;
  index.root = root;
  if (found.empty()) {
    throw DataError(cat("image folder '", root,
                        "' has no class subdirectories; expected ROOT/<class>/<image>.jpg"));
  }
  index.classes = class_names.empty() ? found : class_names;
  for (size_t c = 0; c < found.size(); ++c) {
    const std::string& cls = found[c];
    const int32_t label = class_index(index.classes, cls);
    if (label < 0) {
      throw DataError(cat("class folder '", root, "/", cls, "' is not one of the training split's ",
                          index.classes.size(), " classes"));
    }
    std::vector<std::string> files;
    if (s3) {
      for (auto& [name, o] : s3_files[c]) {
        files.push_back(name);
        index.etags.push_back(o.etag);
        index.sizes.push_back(o.size);
      }
    } else {
      files = sorted_images(root, cls);
    }
    if (files.empty()) {
      throw DataError(cat("class folder '", root, "/", cls,
                          "' has no images (.jpg, .jpeg or .png); remove it or add images"));
    }
    for (std::string& f : files) {
      index.files.push_back(std::move(f));
      index.labels.push_back(label);
    }
  }
  return index;
}

namespace {

class FolderSource : public ImageSource {
 public:
  FolderSource(std::shared_ptr<Storage> storage, FolderIndex index)
      : storage_(std::move(storage)), index_(std::move(index)) {}
  int64_t size() const override { return static_cast<int64_t>(index_.files.size()); }
  int64_t label(int64_t i) const override { return index_.labels[i]; }
  std::string name(int64_t i) const override { return index_.root + "/" + index_.files[i]; }
  void read(int64_t i, SampleData& out) const override {
    out.encoded = true;
    storage_->read_all(name(i), out.bytes, index_.etags.empty() ? "" : index_.etags[i]);
  }
  const std::vector<std::string>& classes() const override { return index_.classes; }
  bool remote() const override { return Storage::is_s3(index_.root); }
  // Note [Dataset fingerprints]: paths below the root, labels, sizes, ETags.
  DataFingerprint fingerprint() const override {
    data::FingerprintBuilder b;
    for (const std::string& c : index_.classes) b.add_name(c);
    for (size_t i = 0; i < index_.files.size(); ++i) {
      b.add_name(index_.files[i]);
      b.add_name(index_.labels[i]);
      if (!index_.sizes.empty()) {
        b.add_size(index_.sizes[i]);
        b.add_etag(index_.etags[i]);
      } else {
        // A file gone since the scan counts as size -1: a difference, not an error.
        std::error_code ec;
        const auto bytes = std::filesystem::file_size(name(i), ec);
        b.add_size(ec ? -1 : static_cast<int64_t>(bytes));
      }
    }
    return b.finish(size(), static_cast<int64_t>(index_.classes.size()));
  }

 private:
  std::shared_ptr<Storage> storage_;
  FolderIndex index_;
};

}  // namespace

std::shared_ptr<ImageSource> open_image_folder(std::shared_ptr<Storage> storage,
                                               const std::string& root,
                                               const std::vector<std::string>& class_names) {
  FolderIndex index = scan_image_folder(*storage, root, class_names);
  return std::make_shared<FolderSource>(std::move(storage), std::move(index));
}

}  // namespace image

std::shared_ptr<ImageSource> open_image_folder(const std::string& root,
                                               const std::vector<std::string>& class_names,
                                               const DataCacheOptions& cache) {
  return image::open_image_folder(std::make_shared<image::Storage>(cache), root, class_names);
}

}  // namespace dtrain
