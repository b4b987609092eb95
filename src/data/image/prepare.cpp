// `dtrain data imagenet-train|imagenet-val`: ImageNet's archives into the
// ImageFolder layout.

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "common/strings.h"
#include "data/image/io.h"
#include "data/image/tar.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace {

using image::File;

// A member name safe to create inside one directory: no separators, no "..".
std::string safe_file_name(const std::string& member, const std::string& archive) {
  const std::string name = image::base_name(member);
  if (name.empty() || name == "." || name == "..") {
    throw DataError(cat("'", archive, "': member '", member, "' has no usable file name"));
  }
  return name;
}

// Copies file[offset, offset + size) to `path`.
void extract(const File& from, int64_t offset, int64_t size, const std::string& path) {
  File out = File::create(path);
  std::vector<uint8_t> buffer(std::min<int64_t>(size, int64_t{4} << 20));
  for (int64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(buffer.size(), size - done));
    from.pread_exact(buffer.data(), n, offset + done);
    out.write_all(buffer.data(), n);
    done += static_cast<int64_t>(n);
  }
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError(cat("cannot open '", path, "'"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::string first_token(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return {};
  return text.substr(begin, text.find_first_of(" \t", begin) - begin);
}

// (image id, wnid) pairs from either labels form (see dtrain/image.h).
std::vector<std::pair<std::string, std::string>> val_labels(const std::string& labels_file,
                                                            const std::string& synsets_file) {
  const std::vector<std::string> lines = read_lines(labels_file);
  std::vector<std::pair<std::string, std::string>> out;
  const bool csv = !lines.empty() && lines[0].find(',') != std::string::npos;
  if (csv) {  // LOC_val_solution.csv
    for (size_t i = 1; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;
      const std::vector<std::string> f = split(lines[i], ',');
      const std::string wnid = f.size() == 2 ? first_token(f[1]) : "";
      if (f[0].empty() || wnid.empty()) {
        throw DataError(cat("'", labels_file, "' line ", i + 1,
                            ": expected 'ImageId,wnid x y x y ...', got '", lines[i], "'"));
      }
      out.emplace_back(f[0], wnid);
    }
    return out;
  }
  if (synsets_file.empty()) {
    throw InvalidArgument(cat("'", labels_file,
                              "' is a ground-truth list of class ids; pass "
                              "synsets_file with one wnid per line in ILSVRC2012_ID order"));
  }
  std::vector<std::string> synsets;
  for (const std::string& line : read_lines(synsets_file)) {
    if (!first_token(line).empty()) synsets.push_back(first_token(line));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (first_token(lines[i]).empty()) continue;
    long long id = 0;
    if (!parse_int(first_token(lines[i]), &id) || id < 1 ||
        id > static_cast<long long>(synsets.size())) {
      throw DataError(cat("'", labels_file, "' line ", i + 1, ": '", lines[i],
                          "' is not a class id in 1..", synsets.size(), " (from '", synsets_file,
                          "')"));
    }
    char name[64];
    std::snprintf(name, sizeof(name), "ILSVRC2012_val_%08zu", i + 1);
    out.emplace_back(name, synsets[static_cast<size_t>(id - 1)]);
  }
  return out;
}

void move_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != EXDEV) throw DataError(cat("cannot move '", from, "' to '", to, "'"));
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec || !std::filesystem::remove(from, ec)) {
    throw DataError(cat("cannot move '", from, "' to '", to, "': ", ec.message()));
  }
}

}  // namespace

PrepareStats prepare_imagenet_train(const std::string& archive, const std::string& out_dir) {
  const File file = File::open_read(archive);
  image::TarReader outer(file, 0, file.size());
  PrepareStats stats;
  image::TarEntry member, image_entry;
  while (outer.next(member)) {
    if (!member.is_file()) continue;
    const std::string name = image::base_name(member.name);
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".tar") != 0) {
      throw DataError(cat("'", archive, "': member '", member.name,
                          "' is not a per-class .tar; expected ImageNet's training archive "
                          "(ILSVRC2012_img_train.tar)"));
    }
    const std::string class_dir = out_dir + "/" + name.substr(0, name.size() - 4);
    image::make_dirs(class_dir);
    image::TarReader inner(file, member.offset, member.size);
    int64_t images = 0;
    while (inner.next(image_entry)) {
      if (!image_entry.is_file()) continue;
      extract(file, image_entry.offset, image_entry.size,
              class_dir + "/" + safe_file_name(image_entry.name, archive));
      ++images;
      stats.bytes += image_entry.size;
    }
    if (images == 0) {
      throw DataError(cat("'", archive, "': class archive '", member.name, "' holds no files"));
    }
    stats.images += images;
    ++stats.classes;
  }
  if (stats.classes == 0) {
    throw DataError(cat("'", archive, "' holds no per-class .tar files"));
  }
  return stats;
}

PrepareStats prepare_imagenet_val(const std::string& images_dir, const std::string& labels_file,
                                  const std::string& out_dir, const std::string& synsets_file) {
  if (!image::is_directory(images_dir)) {
    throw DataError(cat("validation images directory '", images_dir, "' does not exist"));
  }
  const auto labels = val_labels(labels_file, synsets_file);
  if (labels.empty()) throw DataError(cat("'", labels_file, "' lists no images"));
  // File names by stem, whatever their extension (.JPEG as shipped).
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(images_dir)) {
    if (e.is_regular_file()) files[e.path().stem().string()] = e.path().filename().string();
  }
  PrepareStats stats;
  std::set<std::string> classes;
  for (const auto& [id, wnid] : labels) {
    const auto it = files.find(id);
    const std::string class_dir = out_dir + "/" + wnid;
    if (it == files.end()) {
      // Already moved by an earlier, interrupted run?
      if (std::filesystem::exists(class_dir + "/" + id + ".JPEG")) continue;
      throw DataError(
          cat("'", labels_file, "' lists '", id, "', which is not in '", images_dir, "'"));
    }
    if (classes.insert(wnid).second) image::make_dirs(class_dir);
    move_file(images_dir + "/" + it->second, class_dir + "/" + it->second);
    stats.bytes += static_cast<int64_t>(std::filesystem::file_size(class_dir + "/" + it->second));
    ++stats.images;
  }
  stats.classes = static_cast<int64_t>(classes.size());
  return stats;
}

}  // namespace dtrain
