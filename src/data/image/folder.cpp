// ImageFolder: torchvision.datasets.ImageFolder's class and file order.

#include "data/image/folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include "common/strings.h"
#include "data/image/io.h"
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

FolderIndex scan_image_folder(const std::string& root,
                              const std::vector<std::string>& class_names) {
  if (!is_directory(root)) {
    throw DataError(cat("image folder '", root, "' does not exist or is not a directory"));
  }
  FolderIndex index;
  index.root = root;
  const std::vector<std::string> found = sorted_subdirectories(root);
  if (found.empty()) {
    throw DataError(cat("image folder '", root,
                        "' has no class subdirectories; expected ROOT/<class>/<image>.jpg"));
  }
  index.classes = class_names.empty() ? found : class_names;
  for (const std::string& cls : found) {
    const int32_t label = class_index(index.classes, cls);
    if (label < 0) {
      throw DataError(cat("class folder '", root, "/", cls, "' is not one of the training split's ",
                          index.classes.size(), " classes"));
    }
    std::vector<std::string> files = sorted_images(root, cls);
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
  explicit FolderSource(FolderIndex index) : index_(std::move(index)) {}
  int64_t size() const override { return static_cast<int64_t>(index_.files.size()); }
  int64_t label(int64_t i) const override { return index_.labels[i]; }
  std::string name(int64_t i) const override { return index_.root + "/" + index_.files[i]; }
  void read(int64_t i, SampleData& out) const override {
    out.encoded = true;
    read_file(name(i), out.bytes);
  }
  const std::vector<std::string>& classes() const override { return index_.classes; }

 private:
  FolderIndex index_;
};

}  // namespace
}  // namespace image

std::shared_ptr<ImageSource> open_image_folder(const std::string& root,
                                               const std::vector<std::string>& class_names) {
  return std::make_shared<image::FolderSource>(image::scan_image_folder(root, class_names));
}

}  // namespace dtrain
