// Which files of the plugin folders may be loaded: only named folders (and the install's own),
// only files named libnibble_<name>.so, symlinks resolved first with the policy applied to the
// file they reach, folders and files that others could write refused unless allowed. Runs no
// plugin code.
#pragma once

#include <nibble/options.hpp>
#include <nibble/registry.hpp>

#include <string>
#include <vector>

namespace nibble::detail {

/// A file of a plugin folder whose name matches libnibble_<stem>.so.
struct Candidate {
  std::string path;    ///< in the searched folder
  std::string target;  ///< the canonical file a symlink leads to ("" when path is not a link)
  std::string stem;
  /// Whether the name is a symbolic link.
  bool is_link() const { return !target.empty(); }
  /// The file that is read and loaded.
  const std::string& library() const { return is_link() ? target : path; }
  /// Both names for a link, for messages.
  std::string where() const;
};

/// The candidates of `dirs` in search order (each folder once, its files sorted by name). Every
/// folder searched is appended to `searched`; every folder or file refused gets a report.
std::vector<Candidate> find_candidates(const std::vector<std::string>& dirs,
                                       const RuntimeOptions& options,
                                       std::vector<std::string>& searched,
                                       std::vector<LoadReport>& reports);

/// Why the allow-list or the folder and owner policy keeps `c` from being loaded, or "".
std::string policy_refusal(const Candidate& c, const RuntimeOptions& options);

}  // namespace nibble::detail
