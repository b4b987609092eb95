// `cmake --install` and `cpack -G DEB` as a user meets them: the installed
// tree holds the headers, the libraries, the dtrain CLI and a CMake package;
// the installed examples/ configure, build and run against it as a project
// of the user's would (find_package(dtrain), dtrain::dtrain); the Debian
// package holds the same files and names its Debian dependencies.
//
// Note [One install, one out-of-tree build]
// Each TEST runs in its own process (ctest), but the installation and the
// examples' build happen in fixed folders under the build tree, under a lock:
// the first test installs and builds, later ones find everything up to date
// (and ccache finds the same paths again in the next run). ctest runs them one
// at a time (RESOURCE_LOCK in tests/install/CMakeLists.txt), so a second
// test does not hold a slot of `ctest -j` only to wait; the lock covers runs
// outside ctest.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>

#include "examples/example_output.h"

namespace dtrain::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kWork = fs::path(DTRAIN_BINARY_DIR) / "install-test";
const fs::path kPrefix = kWork / "prefix";
const fs::path kExamplesBuild = kWork / "examples-build";

const std::vector<std::string> kComponents = {"common",  "comm",   "ddp",     "live",   "amp",
                                              "data",    "models", "train",   "launch", "observe",
                                              "measure", "ps",     "ps_torch"};
const std::vector<std::string> kExamples = {
    "quickstart",       "amp",          "custom_model", "horovod_optimizer", "checkpoint_resume",
    "parameter_server", "live_recovery"};

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

/// Installs into kPrefix and builds the installed examples out of tree with
/// the same compiler, generator and compiler launcher (Note [One install,
/// one out-of-tree build]). The result of this process's first call.
const ShellRun& install_and_build_examples() {
  static const ShellRun result = [] {
    fs::create_directories(kWork);
    std::string configure =
        "'" CMAKE_COMMAND "' -S " + quote(kPrefix / INSTALL_DOCDIR / "examples") + " -B " +
        quote(kExamplesBuild) +
        " -G '" CMAKE_GENERATOR "' -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER='" CXX_COMPILER
        "' -DCMAKE_PREFIX_PATH=" +
        quote(kPrefix) + " -DTorch_DIR='" TORCH_DIR "'";
    std::string launcher = CXX_LAUNCHER;  // a CMake list, '|' for ';'
    std::replace(launcher.begin(), launcher.end(), '|', ';');
    if (!launcher.empty()) configure += " '-DCMAKE_CXX_COMPILER_LAUNCHER=" + launcher + "'";
    // Configured once per build folder; a configure that failed leaves a
    // CMakeCache.txt but no build file, so it is the build file that says so.
    const std::string steps = "'" CMAKE_COMMAND "' --install " + quote(DTRAIN_BINARY_DIR) +
                              " --prefix " + quote(kPrefix) + " && " + "{ test -f " +
                              quote(kExamplesBuild / "build.ninja") + " || test -f " +
                              quote(kExamplesBuild / "Makefile") + " || " + configure + "; } && " +
                              "nice '" CMAKE_COMMAND "' --build " + quote(kExamplesBuild) + " -j2";
    return run_shell("timeout -k 5 1200 flock " + quote(kWork / "lock") + " sh -c \"" + steps +
                     "\" 2>&1");
  }();
  return result;
}

TEST(Install, TheInstalledTreeHoldsHeadersLibrariesTheCliAndTheCMakePackage) {
  const ShellRun& r = install_and_build_examples();
  ASSERT_TRUE(fs::exists(kPrefix / INSTALL_LIBDIR / "cmake/dtrain")) << r.output;
  for (const auto& header :
       fs::directory_iterator(fs::path(DTRAIN_SOURCE_DIR) / "include/dtrain")) {
    EXPECT_TRUE(fs::exists(kPrefix / "include/dtrain" / header.path().filename()))
        << header.path().filename() << " not installed";
  }
  EXPECT_TRUE(fs::exists(kPrefix / "include/dtrain/config.h")) << "the generated config.h";
  for (const auto& c : kComponents) {
    EXPECT_TRUE(fs::exists(kPrefix / INSTALL_LIBDIR / ("libdtrain_" + c + ".a"))) << c;
  }
  EXPECT_TRUE(fs::exists(kPrefix / "bin/dtrain"));
  for (const char* f : {"dtrainConfig.cmake", "dtrainConfigVersion.cmake", "dtrainTargets.cmake"}) {
    EXPECT_TRUE(fs::exists(kPrefix / INSTALL_LIBDIR / "cmake/dtrain" / f)) << f;
  }
  EXPECT_FALSE(fs::exists(kPrefix / "include/dtrain/src")) << "src/ is never installed";
}

TEST(Install, EveryHeaderAnInstalledHeaderIncludesIsInstalledToo) {
  install_and_build_examples();
  const fs::path include = kPrefix / "include";
  ASSERT_TRUE(fs::exists(include / "dtrain"));
  const std::regex quoted(R"(^\s*#\s*include\s*"([^"]+)\")");
  int checked = 0;
  for (const auto& header : fs::directory_iterator(include / "dtrain")) {
    std::ifstream in(header.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, quoted)) continue;
      ++checked;
      EXPECT_TRUE(fs::exists(include / m[1].str()))
          << header.path().filename() << " includes \"" << m[1] << "\", which is not installed";
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Install, TheExamplesBuildOutOfTreeAgainstTheInstalledPackage) {
  const ShellRun& r = install_and_build_examples();
  ASSERT_EQ(r.code, 0) << r.output;
  for (const auto& e : kExamples)
    EXPECT_TRUE(fs::exists(kExamplesBuild / e)) << e << "\n" << r.output;
}

TEST(Install, AnOutOfTreeExampleTrainsTwoRanksInSyncUnderTheInstalledDtrainRun) {
  const ShellRun& build = install_and_build_examples();
  ASSERT_EQ(build.code, 0) << build.output;
  const ShellRun r = run_example((kPrefix / "bin/dtrain").string(), "--nproc-per-node 2",
                                 (kExamplesBuild / "custom_model").string(), "50");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ranks = example_ranks(r.output);
  ASSERT_EQ(ranks.size(), 2u) << r.output;
  EXPECT_EQ(ranks[0].checksum, ranks[1].checksum) << r.output;
}

/// The lines of `dpkg-deb <flag> deb`.
ShellRun dpkg_deb(const std::string& flag, const fs::path& deb) {
  return run_shell("dpkg-deb " + flag + " " + quote(deb) + " 2>&1");
}

/// This process's Debian package, made once into a folder of its own (tests
/// may run at once) that is removed when the process ends, and unpacked
/// there with dpkg-deb -x.
struct DebBuild {
  ShellRun pack;
  std::vector<fs::path> debs;
  fs::path unpacked;
};

class RemoveAtExit : public ::testing::Environment {
 public:
  static fs::path dir() { return kWork / ("deb-" + std::to_string(::getpid())); }
  void TearDown() override { fs::remove_all(dir()); }
};
const auto* const kRemoveDebDir = ::testing::AddGlobalTestEnvironment(new RemoveAtExit);

const DebBuild& build_deb() {
  static const DebBuild result = [] {
    DebBuild b;
    const fs::path out = RemoveAtExit::dir();
    fs::remove_all(out);
    b.pack = run_shell("timeout -k 5 600 '" CPACK_COMMAND "' -G DEB --config " +
                       quote(fs::path(DTRAIN_BINARY_DIR) / "CPackConfig.cmake") + " -B " +
                       quote(out) + " 2>&1");
    if (b.pack.code != 0) return b;
    for (const auto& f : fs::directory_iterator(out)) {
      if (f.path().extension() == ".deb") b.debs.push_back(f.path());
    }
    if (b.debs.size() != 1) return b;
    b.unpacked = out / "unpacked";
    const ShellRun x = run_shell("dpkg-deb -x " + quote(b.debs[0]) + " " + quote(b.unpacked));
    if (x.code != 0) b.unpacked.clear();
    return b;
  }();
  return result;
}

bool have_dpkg_deb() { return std::system("command -v dpkg-deb > /dev/null 2>&1") == 0; }

TEST(DebianPackage, HoldsHeadersLibrariesTheCMakePackageAndTheCliAndNamesItsDebianDependencies) {
  if (!have_dpkg_deb()) GTEST_SKIP() << "no dpkg-deb";
  const DebBuild& deb = build_deb();
  ASSERT_EQ(deb.pack.code, 0) << deb.pack.output;
  const auto& debs = deb.debs;
  ASSERT_EQ(debs.size(), 1u) << deb.pack.output;
  EXPECT_EQ(debs[0].filename().string().rfind("dtrain_" DTRAIN_VERSION "_", 0), 0u) << debs[0];

  const ShellRun contents = dpkg_deb("-c", debs[0]);
  ASSERT_EQ(contents.code, 0) << contents.output;
  std::vector<std::string> expected = {"./usr/bin/dtrain",
                                       "./usr/include/dtrain/ddp.h",
                                       "./usr/include/dtrain/config.h",
                                       "./usr/" INSTALL_LIBDIR "/cmake/dtrain/dtrainConfig.cmake",
                                       "./usr/" INSTALL_LIBDIR "/cmake/dtrain/dtrainTargets.cmake",
                                       "./usr/" INSTALL_LIBDIR
                                       "/cmake/dtrain/dtrainConfigVersion.cmake",
                                       "./usr/" INSTALL_DOCDIR "/examples/CMakeLists.txt"};
  for (const auto& c : kComponents) {
    expected.push_back("./usr/" INSTALL_LIBDIR "/libdtrain_" + c + ".a");
  }
  for (const auto& path : expected) {
    EXPECT_NE(contents.output.find(" " + path + "\n"), std::string::npos)
        << path << " not in the package:\n"
        << contents.output;
  }

  const ShellRun info = dpkg_deb("-I", debs[0]);
  ASSERT_EQ(info.code, 0) << info.output;
  EXPECT_NE(info.output.find(" Package: dtrain\n"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find(" Version: " DTRAIN_VERSION "\n"), std::string::npos) << info.output;
  std::smatch depends;
  const std::string text = info.output;
  ASSERT_TRUE(std::regex_search(text, depends, std::regex(" Depends: ([^\n]*)"))) << info.output;
  for (const char* dep : {"libzmq3-dev", "prometheus-cpp-dev", "nlohmann-json3-dev", "zlib1g-dev",
                          "libturbojpeg0-dev", "libpng-dev"}) {
    EXPECT_NE(depends[1].str().find(dep), std::string::npos) << dep << " in " << depends[1];
  }
  if (DEB_NEEDS_LIBTORCH) {  // built with Debian's LibTorch
    EXPECT_NE(depends[1].str().find("libtorch-dev (>= "), std::string::npos) << depends[1];
  }
}

TEST(DebianPackage, ItsCMakePackageConfiguresTheExamplesFromTheUnpackedTree) {
  if (!have_dpkg_deb()) GTEST_SKIP() << "no dpkg-deb";
  const DebBuild& deb = build_deb();
  ASSERT_FALSE(deb.unpacked.empty()) << deb.pack.output;
  const fs::path usr = deb.unpacked / "usr";
  const fs::path build = RemoveAtExit::dir() / "examples";
  const ShellRun r =
      run_shell("timeout -k 5 300 '" CMAKE_COMMAND "' -S " +
                quote(usr / INSTALL_DOCDIR / "examples") + " -B " + quote(build) +
                " -DCMAKE_PREFIX_PATH=" + quote(usr) + " -DTorch_DIR='" TORCH_DIR "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  // find_package(dtrain) found the unpacked package, not another one.
  std::ifstream cache(build / "CMakeCache.txt");
  const std::string text((std::istreambuf_iterator<char>(cache)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("dtrain_DIR:PATH=" + (usr / INSTALL_LIBDIR / "cmake/dtrain").string()),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace dtrain::testing
