// The campo command line: subcommands train, eval, and --version.
#pragma once

#include <string>
#include <vector>

namespace campo::cli {

// Parses argv, runs the subcommand, returns the process exit code. Errors are printed
// as one line "campo: error: ..." on stderr with a non-zero return.
int main(int argc, char** argv);
int run(const std::vector<std::string>& args);

// What an option of campo train means something for, by model kind and data-set kind (bit
// sets of the enums below). An option given outside its scope is one error line naming it
// and why, before any work; tests/tools/option_scope_test.cc walks the whole table.
enum ModelKinds : unsigned {
  kClassifier = 1,  // image models (models.h's ModelInput::images, not a GAN)
  kMaskedLm = 2,    // bert
  kGan = 4,         // dcgan
  kAllModels = 7,
};
enum DataKinds : unsigned {
  kIdx = 1,        // fashion-mnist, mnist
  kSynthetic = 2,  // synthetic
  kCifar = 4,      // cifar10
  kFolder = 8,     // folder:PATH
  kText = 16,      // fortunes, text:PATH
  kAllData = 31,
};
struct OptionScope {
  const char* option;
  unsigned models, data;
  const char* why;  // the error's reason: "<option> <why>"
};
const std::vector<OptionScope>& train_option_scopes();
// The kinds of a model and of a data set (a name campo train takes; unknown: 0).
unsigned model_kind(const std::string& model);
unsigned data_kind(const std::string& dataset);

}  // namespace campo::cli
