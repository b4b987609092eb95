// How a program that links dtrain and LibTorch is linked: PyPI's LibTorch 2.x
// exports a copy of libstdc++'s std::filesystem that crashes when a program's
// calls bind to it (Note [libstdc++ before LibTorch] in CMakeLists.txt). The
// calls must bind to libstdc++ (or to the program itself, where libstdc++ is
// linked statically), never to LibTorch.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace {

// The file that defines `fn` in this process, as the dynamic linker bound it.
std::string defining_file(void* fn) {
  Dl_info info{};
  if (::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "";
  return std::filesystem::path(info.dli_fname).filename().string();
}

TEST(Linking, StdFilesystemCallsBindToLibstdcxxNotToLibTorchsCopy) {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  using TempDirectory = std::filesystem::path (*)();
  for (void* fn : {reinterpret_cast<void*>(static_cast<RemoveAll>(&std::filesystem::remove_all)),
                   reinterpret_cast<void*>(
                       static_cast<TempDirectory>(&std::filesystem::temp_directory_path))}) {
    const std::string file = defining_file(fn);
    ASSERT_FALSE(file.empty()) << "dladdr found no object for a std::filesystem function";
    EXPECT_EQ(file.rfind("libtorch", 0), std::string::npos)
        << "std::filesystem binds to " << file << ": link libstdc++.so.6 before LibTorch";
    EXPECT_EQ(file.rfind("libc10", 0), std::string::npos)
        << "std::filesystem binds to " << file << ": link libstdc++.so.6 before LibTorch";
  }
  // What crashed on the GPU machine: a directory made and removed.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dtrain-linking-check-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "inner");
  std::error_code ec;
  EXPECT_GT(std::filesystem::remove_all(dir, ec), 0u) << ec.message();
}

}  // namespace
