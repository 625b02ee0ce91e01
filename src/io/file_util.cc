#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "mxtrain/error.h"

namespace mxtrain::internal {

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7F) ? '?' : c;
  }
  return out;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::Close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

size_t ReadUpTo(int fd, void* buffer, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd, static_cast<char*>(buffer) + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) Fail("cannot read '", Printable(path), "': ", std::strerror(errno));
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::write(fd, static_cast<const char*>(data) + done, n - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
    done += static_cast<size_t>(put);
  }
}

void CheckNotDirectory(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    Fail("cannot write '", Printable(path), "': ", std::strerror(EISDIR));
  }
}

int CreateTemporary(const std::string& path, std::string* tmp) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (static_cast<uint64_t>(::getpid()) << 32));
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp = path + ".tmp.";
    for (int i = 0; i < 6; ++i) *tmp += kChars[rng() % (sizeof(kChars) - 1)];
    const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

void SyncAndClose(Fd& fd, const std::string& path) {
  int rc;
  do {
    rc = ::fsync(fd.get());
  } while (rc != 0 && errno == EINTR);
  // EINVAL: a special file that cannot be synced; its data went wherever it goes.
  if (rc != 0 && errno != EINVAL) {
    Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
  }
  if (fd.Close() != 0) Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
}

void SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) ::fsync(fd.get());
}

Temporaries::~Temporaries() {
  for (const std::string& tmp : paths_) ::unlink(tmp.c_str());
}

void RenameFront(Temporaries& temporaries, const std::string& path) {
  std::vector<std::string>& pending = temporaries.paths();
  if (::rename(pending.front().c_str(), path.c_str()) != 0) {
    Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
  }
  pending.erase(pending.begin());
}

}  // namespace mxtrain::internal
