// Internal: the POSIX file plumbing that the .npy and safetensors readers and writers share:
// errno-naming reads and writes, and atomic replacement through "<path>.tmp.XXXXXX"
// temporaries that are removed on any failure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mxtrain::internal {

// Keeps error messages on one line whatever bytes a file or path holds: control characters
// become '?' (UTF-8 in paths passes through).
std::string Printable(std::string_view s);

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close's own error (a delayed write error on some filesystems).
  int Close();

 private:
  int fd_;
};

// Reads up to n bytes; fewer only at end of file. Throws Error "cannot read '<path>': ...".
size_t ReadUpTo(int fd, void* buffer, size_t n, const std::string& path);

// Writes all n bytes. Throws Error "cannot write '<path>': ...".
void WriteAll(int fd, const void* data, size_t n, const std::string& path);

// Throws Error "cannot write '<path>': Is a directory" when path is a directory: rename()
// cannot replace one, and finding out before writing anything keeps a write all-or-nothing.
void CheckNotDirectory(const std::string& path);

// Creates "<path>.tmp.XXXXXX" exclusively and returns its descriptor (-1 with errno set on
// failure). Not mkstemp: its files are mode 0600, while open(0666) lets the umask give the
// output the permissions any new file would get.
int CreateTemporary(const std::string& path, std::string* tmp);

// fsync()s and closes a finished temporary, so that the rename that follows cannot publish a
// file whose data is still only in the page cache. Throws Error "cannot write '<path>': ...".
void SyncAndClose(Fd& fd, const std::string& path);

// Best effort fsync() of the directory holding path, making a rename into it durable.
// Errors are ignored: the file itself is complete, and some filesystems refuse the call.
void SyncDirectoryOf(const std::string& path);

// Temporary files not yet renamed into place; the destructor removes them, so an exception
// anywhere in a writer leaves no temporary behind.
class Temporaries {
 public:
  Temporaries() = default;
  Temporaries(const Temporaries&) = delete;
  Temporaries& operator=(const Temporaries&) = delete;
  ~Temporaries();
  std::vector<std::string>& paths() { return paths_; }

 private:
  std::vector<std::string> paths_;
};

// Renames the oldest pending temporary over `path` and forgets it. Throws Error "cannot
// write '<path>': ..." (the temporary is then still removed by the destructor).
void RenameFront(Temporaries& temporaries, const std::string& path);

}  // namespace mxtrain::internal
