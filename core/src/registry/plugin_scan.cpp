#include "plugin_scan.hpp"

#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

#include "../file_kind.hpp"

namespace fs = std::filesystem;

namespace nibble::detail {

namespace {

const std::regex& plugin_file_pattern() {
  static const std::regex re("^libnibble_([a-z0-9_]+)\\.so$");
  return re;
}

constexpr const char* kUnsafeHint =
    " (allow it with --allow-unsafe-plugin-dirs or NIBBLE_ALLOW_UNSAFE_PLUGIN_DIRS=1)";

// Why loading code from `path` would let someone other than this user (or root) choose it, or ""
// when it is safe: world-writable, or owned by another user.
std::string unsafe_because(const std::string& path, const char* what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  if (st.st_mode & S_IWOTH)
    return std::string(what) + " " + escape_untrusted(path) +
           " is world-writable: anyone could plant a plugin there";
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return std::string(what) + " " + escape_untrusted(path) + " is owned by uid " +
           std::to_string(st.st_uid) + ", neither this user (uid " + std::to_string(::geteuid()) +
           ") nor root";
  return "";
}

// Resolve a symlink and check that what the name reaches is a regular file; "" when it is.
std::string resolve_candidate(Candidate& c) {
  struct stat st;
  if (::lstat(c.path.c_str(), &st) != 0)
    return std::string("cannot be examined: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path target = fs::canonical(c.path, ec);
    if (ec) return "is a symbolic link that cannot be resolved: " + ec.message();
    c.target = target.string();
    if (::stat(c.target.c_str(), &st) != 0)
      return "is a symbolic link to " + escape_untrusted(c.target) +
             ", which cannot be examined: " + std::strerror(errno);
    if (!S_ISREG(st.st_mode))
      return "is a symbolic link to " + escape_untrusted(c.target) + ", which is " +
             file_kind(st.st_mode) + ", not a regular file";
    // A link to another plugin's file would load that plugin under a name it does not have; it
    // loads under its own name from its own file instead.
    std::smatch m;
    const std::string target_name = target.filename().string();
    if (std::regex_match(target_name, m, plugin_file_pattern()) && m[1].str() != c.stem)
      return "skipped: libnibble_" + c.stem + ".so is a symbolic link to " +
             escape_untrusted(c.target) + ", the file of plugin '" + m[1].str() +
             "', which loads only under its own name";
    return "";
  }
  if (!S_ISREG(st.st_mode))
    return std::string("is ") + file_kind(st.st_mode) + ", not a regular file";
  return "";
}

LoadReport folder_report(const std::string& dir, std::string message) {
  LoadReport r;
  r.path = dir;
  r.message = std::move(message);
  return r;
}

// Why folder `dir` is not searched, or "".
std::string folder_refusal(const std::string& dir, const RuntimeOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "plugin directory does not exist or is not a directory";
  if (options.allow_unsafe_plugin_dirs) return "";
  std::string why = unsafe_because(dir, "plugin directory");
  return why.empty() ? "" : "refused: " + why + kUnsafeHint;
}

// The candidates of one folder, sorted by name; `seen` holds (library, name) pairs already found:
// one library may be reached under several names (a link beside its target), and each name is
// checked on its own while the library is loaded once.
void scan_folder(const std::string& dir, std::set<std::string>& seen, std::vector<Candidate>& found,
                 std::vector<LoadReport>& reports) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& entry : entries) {
    std::smatch m;
    std::string name = entry.filename().string();
    if (!std::regex_match(name, m, plugin_file_pattern())) continue;
    Candidate c;
    c.path = entry.string();
    c.stem = m[1].str();
    if (std::string problem = resolve_candidate(c); !problem.empty()) {
      LoadReport r;
      r.path = c.path;
      r.target = c.target;
      r.backend = c.stem;
      r.message = problem;
      reports.push_back(r);
      continue;
    }
    if (!seen.insert(c.library() + '\n' + c.stem).second) continue;
    found.push_back(std::move(c));
  }
}

}  // namespace

std::string Candidate::where() const {
  return is_link() ? escape_untrusted(path) + " -> " + escape_untrusted(target)
                   : escape_untrusted(path);
}

std::vector<Candidate> find_candidates(const std::vector<std::string>& dirs,
                                       const RuntimeOptions& options,
                                       std::vector<std::string>& searched,
                                       std::vector<LoadReport>& reports) {
  std::set<std::string> seen_dirs, seen_files;
  std::vector<Candidate> found;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    std::string key = ec ? dir : canonical.string();
    if (!seen_dirs.insert(key).second) continue;
    searched.push_back(key);
    if (std::string why = folder_refusal(key, options); !why.empty()) {
      reports.push_back(folder_report(key, why));
      continue;
    }
    scan_folder(key, seen_files, found, reports);
  }
  return found;
}

std::string policy_refusal(const Candidate& c, const RuntimeOptions& options) {
  if (!options.allowed_plugins.empty() &&
      std::find(options.allowed_plugins.begin(), options.allowed_plugins.end(), c.stem) ==
          options.allowed_plugins.end())
    return "skipped: '" + c.stem + "' is not in the plugin allow-list";
  if (options.allow_unsafe_plugin_dirs) return "";
  // The policy applies to the file that would be loaded and to the folder holding it, which for
  // a link is not the folder that was searched.
  std::string why = unsafe_because(c.library(), "plugin file");
  if (why.empty() && c.is_link())
    why = unsafe_because(fs::path(c.library()).parent_path().string(), "plugin directory");
  return why.empty() ? "" : "refused: " + why + kUnsafeHint;
}

}  // namespace nibble::detail
