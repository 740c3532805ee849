// The fuzz targets' bodies (fuzz/<name>_fuzz.cc), one per parser of outside input. Each
// takes arbitrary bytes; see fuzz/fuzz_util.h for the contract.
#pragma once

#include <cstddef>
#include <cstdint>

namespace campo {
struct BackendIdentity;
}

namespace campo::fuzz {

void idx(const uint8_t* data, size_t size);             // datasets/idx.cc, plain or gzip
void cifar10(const uint8_t* data, size_t size);         // datasets/cifar10.cc
void image(const uint8_t* data, size_t size);           // datasets/image_file.cc (stb_image)
void safetensors(const uint8_t* data, size_t size);     // graph/checkpoint.cc
void calibration(const uint8_t* data, size_t size);     // amp/calibration.cc
void amp_lists_file(const uint8_t* data, size_t size);  // amp/lists.cc, JSON edits
void amp_lists_edit(const uint8_t* data, size_t size);  // amp/lists.cc, --amp-lists
// amp/precision_policy.cc, --precision-policy
void precision_policy_file(const uint8_t* data, size_t size);
void text(const uint8_t* data, size_t size);            // datasets/text.cc and tokenizer.cc
void predict(const uint8_t* data, size_t size);         // train/predict.cc: profiles, tables
void activity_table(const uint8_t* data, size_t size);  // runtime/kernel_activity.cc
void counter_table(const uint8_t* data, size_t size);   // runtime/hardware_counters.cc
void numerics_file(const uint8_t* data, size_t size);   // perf/numerics_file.cc

// The machine identity the calibration target reads against (and its seeds are made for).
BackendIdentity calibration_fuzz_machine();
// The campo version the seeds record (their files are stale to any real version).
inline constexpr const char* kCalibrationFuzzCampoVersion = "fuzz";

}  // namespace campo::fuzz
