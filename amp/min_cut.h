// Exact minimisation of a sum of binary terms that a graph cut can represent: unary costs
// and "pay c when a = 0 and b = 1" pair costs (c >= 0), which are the submodular pair terms.
// Solved as an s-t minimum cut (Kolmogorov & Zabih, "What energy functions can be minimized
// via graph cuts?", 2004) with Dinic's max-flow. The cost-aware policy uses it to find the
// precision assignment of least predicted step time, casts included (amp/cost_aware.h).
#pragma once

#include <cstdint>
#include <vector>

namespace campo {

class BinaryCut {
 public:
  // A term's operand: a variable, or a constant 0 / 1.
  struct Lit {
    int var = -1;  // >= 0: a variable
    int value = 0; // when var < 0
  };
  static Lit zero() { return {-1, 0}; }
  static Lit one() { return {-1, 1}; }

  Lit new_var() { unary_.push_back({0.0, 0.0}); return {int(unary_.size()) - 1, 0}; }
  int num_vars() const { return int(unary_.size()); }

  // cost e0 when x = 0, e1 when x = 1 (either sign).
  void add_unary(Lit x, double e0, double e1);
  // cost c (>= 0, may be `infinity()`) when a = 0 and b = 1.
  void add_if_0_1(Lit a, Lit b, double c);
  static double infinity() { return 1e300; }

  // The labels of least total cost; `cost` (if set) receives it. Exact for these terms.
  std::vector<char> minimize(double* cost = nullptr) const;

 private:
  struct Pair { int a, b; double c; };
  std::vector<std::pair<double, double>> unary_;
  std::vector<Pair> pairs_;
  double constant_ = 0.0;
};

}  // namespace campo
