// Image files through the image folder's decoder (datasets/image_file.cc, stb_image): the
// input is one file, probed, decoded and preprocessed as the folder loader does (resize +
// centre crop to RGB, and a random crop with padding to grey).
#include <vector>

#include "datasets/image_file.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

void image(const uint8_t* data, size_t size) {
  TempInput input("image", data, size);
  ImageFileInfo info;
  std::string reason;
  const bool probed = probe_image_file(input.path(), &info, &reason);
  // A few hundred bytes of RLE can legitimately decode to millions of pixels (up to
  // kMaxImagePixels, ImageFileTest checks that limit), which takes seconds under ASan:
  // decode only headers up to a megapixel, so that timeouts mean a real hang.
  if (probed && info.height * info.width > (int64_t(1) << 20)) return;
  reject_or_accept([&] {
    const DecodedImage decoded = decode_image_file(input.path());
    require(probed, "stb_image decoded a file that its header probe refused");
    require(decoded.height == info.height && decoded.width == info.width,
            "the decoded size differs from the probed size");
    ImageTransform rgb;
    rgb.crop = 8;
    rgb.resize = 9;
    rgb.channels = 3;
    rgb.mean = kImageNetMean;
    rgb.stddev = kImageNetStd;
    ImageTransform grey;
    grey.crop = 7;
    grey.padding = 2;
    grey.random = true;
    grey.channels = 1;
    grey.mean = {0.5f};
    grey.stddev = {0.25f};
    std::vector<float> out(3 * 8 * 8);
    Rng rng(size);
    for (const ImageTransform& t : {rgb, grey}) {
      t.validate("fuzz");
      transform_image(decoded.view(), t, rng, out.data());
    }
  });
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::image)
