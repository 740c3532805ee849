// TensorBoard event files, TensorFlow's format written without a protobuf library: TFRecord
// framing (uint64 length, masked CRC-32C of the length, the data, masked CRC-32C of the data;
// all little-endian) around `tensorboard.Event` messages (event.proto: wall_time = 1 double,
// step = 2 int64, file_version = 3 string, summary = 5, session_log = 7) whose Summary
// (summary.proto: repeated Value value = 1) holds Values {tag = 1 string, simple_value = 2
// float}. The first record carries file_version "brain.Event:2", as TensorFlow's writers'.
// Every record is flushed once written, so a process that dies leaves the ones before
// complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace campo {

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF); crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size);
// The masked CRC-32C of the TFRecord framing: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

class EventFileWriter {
 public:
  // A new event file in the existing directory `dir`, named as TensorFlow names its own
  // (events.out.tfevents.<unix time>.<host>.<pid>) and ending in .campo; never an existing
  // one: a second file of the same process within the second ends in .campo.1, .campo.2, ...,
  // names that sort after the first, as TensorBoard reads a directory's files (by name).
  // Writes the file_version record. Errors name `what` (e.g. "--tensorboard directory").
  EventFileWriter(const std::string& dir, const std::string& what);
  // A SessionLog START at `step`: TensorBoard drops the events of steps >= `step` from the
  // files before this one (a run resumed from a checkpoint).
  void session_start(int64_t step);
  // One event at `step` of scalars (tag, value).
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;  // before file_: its initialiser names the file here
  std::unique_ptr<std::FILE, CloseFile> file_;
};

}  // namespace campo
