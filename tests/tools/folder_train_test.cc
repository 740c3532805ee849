// `campo train` on an image folder (one sub-folder per class) end to end, through the CLI
// options a user passes: --dataset folder:PATH, --image-size, --holdout, --augment.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/rng.h"
#include "train/trainer.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

// A 24-bit BMP, written by hand (bottom-up rows padded to 4 bytes).
void write_bmp(const fs::path& path, int w, int h, uint8_t r, uint8_t g, uint8_t b, Rng& rng) {
  const int row = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + uint32_t(row * h);
  std::vector<uint8_t> f(size, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) f[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  f[0] = 'B';
  f[1] = 'M';
  put32(2, size);
  put32(10, 54);
  put32(14, 40);
  put32(18, uint32_t(w));
  put32(22, uint32_t(h));
  f[26] = 1;
  f[28] = 24;
  put32(34, uint32_t(row * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &f[54 + size_t(y * row + x * 3)];
      int noise = int(rng.below(40)) - 20;
      p[0] = uint8_t(std::clamp(int(b) + noise, 0, 255));
      p[1] = uint8_t(std::clamp(int(g) + noise, 0, 255));
      p[2] = uint8_t(std::clamp(int(r) + noise, 0, 255));
    }
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<char*>(f.data()), std::streamsize(f.size()));
}

TEST(FolderTrainTest, MlpLearnsTwoColourClassesFromAFolder) {
  const fs::path root = fs::temp_directory_path() / ("campo_folder_" + std::to_string(::getpid()));
  Rng rng(3);
  for (const char* cls : {"blue", "red"}) {
    fs::create_directories(root / cls);
    for (int i = 0; i < 24; ++i) {
      bool red = std::string(cls) == "red";
      write_bmp(root / cls / ("img" + std::to_string(i) + ".bmp"), 20, 18, red ? 200 : 30, 60,
                red ? 30 : 200, rng);
    }
  }
  TrainOptions o;
  o.model = "mlp";
  o.precision = Precision::fp32;
  o.dataset = "folder:" + root.string();
  o.image_size = 16;
  o.holdout = 0.25;
  o.epochs = 4;
  o.batch = 6;
  o.lr = 0.02f;
  o.report.progress = Progress::none;
  std::ostringstream log;
  TrainResult r = train(o, log, false);
  EXPECT_GE(r.test_accuracy, 0.9) << log.str();
  fs::remove_all(root);
}

TEST(FolderTrainTest, ImageOptionsOnIdxDataAreRefused) {
  TrainOptions o;
  o.dataset = "synthetic";
  o.augment = true;
  std::ostringstream log;
  try {
    train(o, log, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cifar10 and folder data sets only"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace campo
