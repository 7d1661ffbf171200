// SPDX-License-Identifier: Apache-2.0
// Crash-safe checkpoint directories: write under a temporary name, seal with a commit marker that
// records every file's size and CRC-32C, fsync, rename into place, then move the `latest` pointer.
// The same write-then-marker idea as llm.c's DONE files and torch.distributed.checkpoint's
// `.metadata`, with checksums so a truncated or bit-rotted file is refused on resume rather than
// loaded. The checksum is CRC-32C (io/crc32c.h).
#include "tessel/train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/io/crc32c.h"

namespace fs = std::filesystem;

namespace tessel::train {
namespace {

constexpr size_t kCrcBlock = size_t(4) << 20;  // large reads: a multi-GB file in few syscalls
constexpr const char* kManifestFormat = "tessel-checkpoint";
constexpr int kManifestVersion = 1;

std::string errno_text() {
  return std::strerror(errno);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int open_or_throw(const std::string& path, int flags, const char* what) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", errno_text());
  return fd;
}

// Streams an open file through CRC-32C; returns the byte count too, so the size in a manifest is
// the size that was checksummed even if the file changed since it was stat'ed.
uint32_t crc_of_fd(int fd, const std::string& path, uint64_t* bytes) {
  std::vector<uint8_t> buf(kCrcBlock);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n >= 0, "reading '", path, "' failed after ", total, " bytes: ", errno_text());
    if (n == 0) break;
    crc = io::crc32c(buf.data(), size_t(n), crc);
    total += uint64_t(n);
  }
  if (bytes != nullptr) *bytes = total;
  return crc;
}

void fsync_or_throw(int fd, const std::string& path) {
  TESSEL_CHECK(::fsync(fd) == 0, "fsync of '", path, "' failed: ", errno_text());
}

void fsync_dir(const std::string& dir) {
  Fd d{open_or_throw(dir, O_RDONLY | O_DIRECTORY, "directory")};
  fsync_or_throw(d.fd, dir);
}

// Creates (or truncates) `path`, writes all of `text` and fsyncs it.
void write_durable(const std::string& path, const std::string& text) {
  Fd f{open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC, "for writing")};
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(f.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n > 0, "writing '", path, "' failed after ", done, " of ", text.size(),
                 " bytes: ", errno_text());
    done += size_t(n);
  }
  fsync_or_throw(f.fd, path);
}

// Temp file + fsync + rename + fsync of the folder: readers see the old pointer or the new one.
void replace_file_atomic(const std::string& path, const std::string& text) {
  fs::path target(path);
  std::string tmp = (target.parent_path() /
                     ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid())))
                        .string();
  try {
    write_durable(tmp, text);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = errno_text();
    ::unlink(tmp.c_str());
    TESSEL_FAIL("cannot rename '", tmp, "' to '", path, "': ", err);
  }
  fsync_dir(target.parent_path().string());
}

void rename_or_throw(const std::string& from, const std::string& to) {
  TESSEL_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename '", from, "' to '", to,
               "': ", errno_text());
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  TESSEL_CHECK(!ec, "cannot delete '", path, "': ", ec.message());
}

// The last component, also of "runs/x/step_000015/" (whose filename() is empty).
std::string base_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p.filename().string();
}

// "step_<digits>" -> the step; anything else -> nullopt.
std::optional<int64_t> parse_step_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step_";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  int64_t step = 0;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last ||
      !std::all_of(first, last, [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return std::nullopt;
  }
  return step;
}

// ".step_<...>.tmp-<pid>[...]" -> the pid of the process that made it.
std::optional<pid_t> parse_temp_owner(const std::string& name) {
  constexpr std::string_view kTmp = ".tmp-";
  if (name.rfind(".step_", 0) != 0) return std::nullopt;
  size_t at = name.find(kTmp);
  if (at == std::string::npos) return std::nullopt;
  const char* first = name.data() + at + kTmp.size();
  pid_t pid = 0;
  auto [end, ec] = std::from_chars(first, name.data() + name.size(), pid);
  if (ec != std::errc() || end == first || pid <= 0) return std::nullopt;
  return pid;
}

bool regular_file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Every step_<digits> directory, committed or not (resume reports the uncommitted ones).
std::vector<CheckpointInfo> step_dirs(const std::string& run_dir, bool committed_only) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  fs::directory_iterator it(run_dir, ec);
  TESSEL_CHECK(!ec, "cannot list '", run_dir, "': ", ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    TESSEL_CHECK(!ec, "cannot list '", run_dir, "': ", ec.message());
    auto step = parse_step_name(it->path().filename().string());
    std::error_code dir_ec;
    if (!step || !it->is_directory(dir_ec)) continue;
    if (committed_only && !regular_file_exists(it->path() / kCommitMarker)) continue;
    out.push_back({it->path().string(), *step});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

// The checkpoint `latest` names, or "" when there is no usable pointer.
std::string read_latest(const std::string& run_dir) {
  fs::path pointer = fs::path(run_dir) / kLatestPointer;
  if (!regular_file_exists(pointer)) return "";
  FILE* f = std::fopen(pointer.c_str(), "rb");
  if (f == nullptr) return "";
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) {
    name.pop_back();
  }
  return name;
}

// Renamed aside first so a crash mid-delete leaves a stale temp dir, never a half-deleted
// checkpoint that still carries its marker.
void delete_checkpoint(const std::string& run_dir, const std::string& path) {
  std::string aside = (fs::path(run_dir) / ("." + fs::path(path).filename().string() + ".tmp-" +
                                            std::to_string(::getpid()) + ".del"))
                          .string();
  rename_or_throw(path, aside);
  remove_tree(aside);
}

void prune(const std::string& run_dir, int64_t keep, const std::string& protect) {
  std::error_code ec;
  fs::directory_iterator it(run_dir, ec);
  TESSEL_CHECK(!ec, "cannot list '", run_dir, "': ", ec.message());
  std::vector<std::string> stale;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    TESSEL_CHECK(!ec, "cannot list '", run_dir, "': ", ec.message());
    auto pid = parse_temp_owner(it->path().filename().string());
    // Only a pid that no longer exists is stale; EPERM means alive under another user. Pids are
    // local, so this assumes one host writes the run directory.
    if (pid && *pid != ::getpid() && ::kill(*pid, 0) != 0 && errno == ESRCH) {
      stale.push_back(it->path().string());
    }
  }
  for (const auto& dir : stale) remove_tree(dir);

  // Kept: the newest `keep` by step, plus `protect` even when it is older (a run resumed from an
  // earlier checkpoint saves steps below ones already on disk).
  bool removed = false;
  if (keep > 0) {
    auto all = list_checkpoints(run_dir);
    for (int64_t i = 0; i + keep < int64_t(all.size()); ++i) {
      if (fs::path(all[size_t(i)].path).filename() == protect) continue;
      delete_checkpoint(run_dir, all[size_t(i)].path);
      removed = true;
    }
  }
  if (removed || !stale.empty()) fsync_dir(run_dir);
}

// What is wrong with a checkpoint, or "" when it verifies (and then *step is the manifest's step).
// Returned rather than thrown so resume can list the reasons it skipped a checkpoint.
#define TESSEL_REFUSE_IF(cond, ...) \
  if (cond) return ::tessel::detail::concat(__VA_ARGS__)

std::string find_problem(const std::string& dir, int64_t* step) {
  std::error_code ec;
  TESSEL_REFUSE_IF(!fs::exists(dir, ec), "does not exist");
  TESSEL_REFUSE_IF(!fs::is_directory(dir, ec), "is not a directory");
  fs::path marker = fs::path(dir) / kCommitMarker;
  TESSEL_REFUSE_IF(!fs::exists(marker, ec), "no ", kCommitMarker,
                   " marker (incomplete: the save did not finish)");

  std::string text;
  {
    Fd f{::open(marker.c_str(), O_RDONLY | O_CLOEXEC)};
    TESSEL_REFUSE_IF(f.fd < 0, "cannot open ", kCommitMarker, ": ", errno_text());
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(f.fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      TESSEL_REFUSE_IF(n < 0, "cannot read ", kCommitMarker, ": ", errno_text());
      if (n == 0) break;
      text.append(buf, size_t(n));
    }
  }
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string bad = std::string(kCommitMarker) + " is not a valid manifest: ";
  TESSEL_REFUSE_IF(m.is_discarded(), bad, "malformed JSON");
  TESSEL_REFUSE_IF(!m.is_object(), bad, "expected a JSON object");
  TESSEL_REFUSE_IF(!m.contains("format") || m["format"] != kManifestFormat, bad,
                   "\"format\" is not \"", kManifestFormat, "\"");
  TESSEL_REFUSE_IF(!m.contains("version") || !m["version"].is_number_integer(), bad,
                   "no integer \"version\"");
  TESSEL_REFUSE_IF(m["version"].get<int64_t>() != kManifestVersion, "manifest version ",
                   m["version"].get<int64_t>(), " is not supported (this build reads version ",
                   kManifestVersion, ")");
  TESSEL_REFUSE_IF(!m.contains("step") || !m["step"].is_number_integer(), bad,
                   "no integer \"step\"");
  int64_t manifest_step = m["step"].get<int64_t>();
  auto named = parse_step_name(base_name(dir));
  TESSEL_REFUSE_IF(named && *named != manifest_step, "the manifest is for step ", manifest_step,
                   ", the directory name says ", *named, " (renamed or copied)");
  TESSEL_REFUSE_IF(!m.contains("files") || !m["files"].is_object(), bad, "no \"files\" object");

  for (const auto& [name, entry] : m["files"].items()) {
    // A name with a slash or ".." would let a manifest point outside its checkpoint.
    TESSEL_REFUSE_IF(name.empty() || name.find('/') != std::string::npos || name == "." ||
                         name == ".." || name == kCommitMarker,
                     bad, "bad file name '", name, "'");
    TESSEL_REFUSE_IF(!entry.is_object() || !entry.contains("bytes") ||
                         !entry["bytes"].is_number_unsigned() || !entry.contains("crc32c") ||
                         !entry["crc32c"].is_string(),
                     bad, "entry '", name, "' needs \"bytes\" and \"crc32c\"");
    uint64_t want_bytes = entry["bytes"].get<uint64_t>();
    std::string want_crc = entry["crc32c"].get<std::string>();
    fs::path file = fs::path(dir) / name;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      TESSEL_REFUSE_IF(errno == ENOENT, "manifest lists ", name, ", which is missing");
      return ::tessel::detail::concat("cannot stat ", name, ": ", errno_text());
    }
    TESSEL_REFUSE_IF(!S_ISREG(st.st_mode), name, " is not a regular file");
    TESSEL_REFUSE_IF(uint64_t(st.st_size) != want_bytes, name, " has ", uint64_t(st.st_size),
                     " bytes, the manifest says ", want_bytes, " (truncated or replaced)");
    Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
    TESSEL_REFUSE_IF(f.fd < 0, "cannot open ", name, ": ", errno_text());
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    char got[9];
    std::snprintf(got, sizeof(got), "%08x", crc_of_fd(f.fd, file.string(), nullptr));
    TESSEL_REFUSE_IF(want_crc != got, name, " has CRC-32C ", got, ", the manifest says ", want_crc,
                     " (corrupted)");
  }
  *step = manifest_step;
  return "";
}

#undef TESSEL_REFUSE_IF

int64_t verify(const std::string& dir) {
  int64_t step = 0;
  std::string problem = find_problem(dir, &step);
  TESSEL_CHECK(problem.empty(), "checkpoint ", dir, ": ", problem);
  return step;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  TESSEL_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%06lld", static_cast<long long>(step));
  return buf;
}

uint32_t file_crc32c(const std::string& path) {
  Fd f{open_or_throw(path, O_RDONLY, "file")};
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return crc_of_fd(f.fd, path, nullptr);
}

CheckpointWriter::CheckpointWriter(const std::string& run_dir, int64_t step)
    : run_dir_(run_dir), step_(step) {
  std::string name = checkpoint_dir_name(step);
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  TESSEL_CHECK(!ec, "cannot create run directory '", run_dir_, "': ", ec.message());
  TESSEL_CHECK(fs::is_directory(run_dir_, ec), "run directory '", run_dir_, "' is not a directory");
  final_dir_ = (fs::path(run_dir_) / name).string();
  tmp_dir_ = (fs::path(run_dir_) / ("." + name + ".tmp-" + std::to_string(::getpid()))).string();
  // A leftover of ours (an earlier writer of this step in this process, or a dead process whose
  // pid was reused) holds nothing anyone will commit.
  remove_tree(tmp_dir_);
  TESSEL_CHECK(::mkdir(tmp_dir_.c_str(), 0755) == 0, "cannot create '", tmp_dir_,
               "': ", errno_text());
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_dir_, ec);  // best effort: a destructor must not throw
}

std::string CheckpointWriter::commit(int64_t keep) {
  TESSEL_CHECK(!committed_, "checkpoint ", final_dir_, " was already committed");
  // The manifest covers exactly what the caller left in the directory.
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(tmp_dir_, ec);
  TESSEL_CHECK(!ec, "cannot list '", tmp_dir_, "': ", ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    TESSEL_CHECK(!ec, "cannot list '", tmp_dir_, "': ", ec.message());
    std::string name = it->path().filename().string();
    auto type = it->symlink_status(ec).type();
    TESSEL_CHECK(!ec, "cannot stat '", it->path().string(), "': ", ec.message());
    TESSEL_CHECK(type == fs::file_type::regular,
                 "checkpoint files must be regular files in a flat directory, but '",
                 it->path().string(), "' is ",
                 type == fs::file_type::directory ? "a directory" : "not a regular file");
    TESSEL_CHECK(name != kCommitMarker, "'", it->path().string(), "': ", kCommitMarker,
                 " is reserved for the commit marker");
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string path = (fs::path(tmp_dir_) / name).string();
    Fd f{open_or_throw(path, O_RDONLY, "checkpoint file")};
    fsync_or_throw(f.fd, path);
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t bytes = 0;
    char crc[9];
    std::snprintf(crc, sizeof(crc), "%08x", crc_of_fd(f.fd, path, &bytes));
    files[name] = {{"bytes", bytes}, {"crc32c", crc}};
  }
  nlohmann::ordered_json manifest = {{"format", kManifestFormat},
                                     {"version", kManifestVersion},
                                     {"step", step_},
                                     {"files", files}};
  write_durable((fs::path(tmp_dir_) / kCommitMarker).string(), manifest.dump(2) + "\n");
  fsync_dir(tmp_dir_);

  // Replacing a checkpoint of the same step: move the old one aside, put the new one in place,
  // then delete the old one. rename() cannot replace a non-empty directory.
  std::string aside;
  if (fs::exists(final_dir_, ec)) {
    aside = tmp_dir_ + ".old";
    remove_tree(aside);
    rename_or_throw(final_dir_, aside);
  }
  if (::rename(tmp_dir_.c_str(), final_dir_.c_str()) != 0) {
    std::string err = errno_text();
    if (!aside.empty()) ::rename(aside.c_str(), final_dir_.c_str());  // put the old one back
    TESSEL_FAIL("cannot rename '", tmp_dir_, "' to '", final_dir_, "': ", err);
  }
  committed_ = true;
  fsync_dir(run_dir_);
  if (!aside.empty()) remove_tree(aside);
  std::string name = fs::path(final_dir_).filename().string();
  replace_file_atomic((fs::path(run_dir_) / kLatestPointer).string(), name + "\n");
  prune(run_dir_, keep, name);
  return final_dir_;
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir) {
  return step_dirs(run_dir, /*committed_only=*/true);
}

int64_t verify_checkpoint(const std::string& checkpoint_dir) {
  return verify(checkpoint_dir);
}

CheckpointInfo resolve_resume(const std::string& path, std::vector<std::string>* refused) {
  std::error_code ec;
  TESSEL_CHECK(fs::exists(path, ec), "resume: '", path, "' does not exist");
  TESSEL_CHECK(fs::is_directory(path, ec), "resume: '", path,
               "' is not a directory (expected a checkpoint or a run directory)");
  if (fs::exists(fs::path(path) / kCommitMarker, ec) || parse_step_name(base_name(path))) {
    return {path, verify(path)};  // named explicitly: no fallback
  }

  std::vector<std::string> tried;
  auto refuse = [&](const std::string& why) {
    tried.push_back(why);
    if (refused != nullptr) refused->push_back(why);
  };
  std::vector<CheckpointInfo> candidates = step_dirs(path, /*committed_only=*/false);
  std::string latest = read_latest(path);
  if (!latest.empty()) {
    auto named = std::find_if(candidates.begin(), candidates.end(), [&](const CheckpointInfo& c) {
      return fs::path(c.path).filename() == latest;
    });
    const fs::path pointer = fs::path(path) / kLatestPointer;
    if (!parse_step_name(latest)) {
      // Garbage (a bit flip, a foreign file) is described, never echoed to the terminal.
      std::error_code size_ec;
      const uintmax_t bytes = fs::file_size(pointer, size_ec);
      refuse(pointer.string() + ": holds " + std::to_string(size_ec ? latest.size() : bytes) +
             " bytes that are not a checkpoint name (expected one line: step_NNNNNN)");
    } else if (named == candidates.end()) {
      refuse(pointer.string() + ": names '" + latest +
             "', which is not a checkpoint directory here");
    } else {
      std::rotate(named, named + 1, candidates.end());  // latest last = tried first
    }
  }
  TESSEL_CHECK(!candidates.empty(), "resume: '", path,
               "' holds no checkpoints (no step_N directory with a ", kCommitMarker, " marker)");
  for (auto c = candidates.rbegin(); c != candidates.rend(); ++c) {
    int64_t step = 0;
    std::string problem;
    try {
      problem = find_problem(c->path, &step);
    } catch (const Error& e) {  // a failed read while checksumming
      problem = e.what();
    }
    if (problem.empty()) return {c->path, step};
    refuse(c->path + ": " + problem);
  }
  std::string list;
  for (const auto& t : tried) list += "\n  " + t;
  TESSEL_FAIL("resume: no checkpoint in '", path, "' verifies; refused:", list);
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  prune(run_dir, keep, read_latest(run_dir));
}

}  // namespace tessel::train
