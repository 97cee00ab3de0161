// A stand-in Flux view for the view tests: a few files and a manifest whose
// digest is the one images/view/check-view computes, the definition the
// image's build writes (images/view/README.md, "Manifest"), so the driver's
// own verification is checked against it rather than against itself.
#pragma once

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace fcc::testing {

inline void WriteText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// "sha256:<hex>" of `dir` by check-view's tree_digest; "" if python3 failed.
inline std::string CheckViewDigest(const std::string& dir) {
  const std::string command =
      std::string(
          "python3 -c 'import sys, importlib.util as u, "
          "importlib.machinery as m\n"
          "l = m.SourceFileLoader(\"cv\", sys.argv[1])\n"
          "cv = u.module_from_spec(u.spec_from_loader(\"cv\", l))\n"
          "l.exec_module(cv)\n"
          "print(cv.tree_digest(sys.argv[2], "
          "\"share/flux-view/view.json\"))' ") +
      FCC_CHECK_VIEW + " '" + dir + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> out(popen(command.c_str(), "r"),
                                            pclose);
  if (!out) return "";
  std::array<char, 128> line{};
  if (fgets(line.data(), line.size(), out.get()) == nullptr) return "";
  std::string digest(line.data());
  while (!digest.empty() && digest.back() == '\n') digest.pop_back();
  return digest;
}

inline void WriteManifest(const std::string& view_dir, const std::string& name,
                          const std::string& digest) {
  WriteText(view_dir + "/share/flux-view/view.json",
            R"({"name": ")" + name + R"(", "digest": ")" + digest + R"("})");
}

// <views_dir>/<name>/ with bin/flux holding `flux_text`, and its manifest.
// Returns the digest ("" if it could not be computed).
inline std::string MakeTestView(const std::string& views_dir,
                                const std::string& name,
                                const std::string& flux_text = "#!flux\n") {
  const std::string dir = views_dir + "/" + name;
  WriteText(dir + "/bin/flux", flux_text);
  chmod((dir + "/bin/flux").c_str(), 0755);
  std::filesystem::create_directories(dir + "/share/flux-view");
  std::filesystem::create_directory_symlink("bin", dir + "/sbin");
  const std::string digest = CheckViewDigest(dir);
  WriteManifest(dir, name, digest);
  return digest;
}

// The store's name for a copy (view/catalog.h, StoredViewName).
inline std::string StoredName(const std::string& name,
                              const std::string& digest) {
  return name + "@" + digest.substr(7, 16);
}

}  // namespace fcc::testing
