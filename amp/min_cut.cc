#include "amp/min_cut.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "runtime/check.h"

namespace campo {

void BinaryCut::add_unary(Lit x, double e0, double e1) {
  if (x.var < 0) {
    constant_ += x.value ? e1 : e0;
    return;
  }
  unary_[size_t(x.var)].first += e0;
  unary_[size_t(x.var)].second += e1;
}

void BinaryCut::add_if_0_1(Lit a, Lit b, double c) {
  CAMPO_CHECK(c >= 0, "a cut pair cost must not be negative, got ", c);
  if (c == 0) return;
  if (a.var < 0 && b.var < 0) {
    if (a.value == 0 && b.value == 1) constant_ += c;
  } else if (a.var < 0) {
    if (a.value == 0) add_unary(b, 0.0, c);
  } else if (b.var < 0) {
    if (b.value == 1) add_unary(a, c, 0.0);
  } else if (a.var != b.var) {
    pairs_.push_back({a.var, b.var, c});
  }
}

namespace {

// Dinic's max-flow on doubles; capacities saturate at `inf`.
struct Flow {
  struct Edge { int to; double cap; };
  std::vector<Edge> edges;
  std::vector<std::vector<int>> adj;
  std::vector<int> level, next;
  explicit Flow(int n) : adj(size_t(n)), level(size_t(n)), next(size_t(n)) {}
  void add(int u, int v, double cap) {
    adj[size_t(u)].push_back(int(edges.size()));
    edges.push_back({v, cap});
    adj[size_t(v)].push_back(int(edges.size()));
    edges.push_back({u, 0.0});
  }
  bool bfs(int s, int t, double eps) {
    std::fill(level.begin(), level.end(), -1);
    std::queue<int> q;
    level[size_t(s)] = 0;
    q.push(s);
    while (!q.empty()) {
      int u = q.front();
      q.pop();
      for (int e : adj[size_t(u)])
        if (edges[size_t(e)].cap > eps && level[size_t(edges[size_t(e)].to)] < 0) {
          level[size_t(edges[size_t(e)].to)] = level[size_t(u)] + 1;
          q.push(edges[size_t(e)].to);
        }
    }
    return level[size_t(t)] >= 0;
  }
  double dfs(int u, int t, double pushed, double eps) {
    if (u == t) return pushed;
    for (int& k = next[size_t(u)]; k < int(adj[size_t(u)].size()); ++k) {
      const int e = adj[size_t(u)][size_t(k)];
      Edge& ed = edges[size_t(e)];
      if (ed.cap <= eps || level[size_t(ed.to)] != level[size_t(u)] + 1) continue;
      const double got = dfs(ed.to, t, std::min(pushed, ed.cap), eps);
      if (got > 0) {
        ed.cap -= got;
        edges[size_t(e ^ 1)].cap += got;
        return got;
      }
    }
    return 0.0;
  }
  void run(int s, int t, double eps) {
    while (bfs(s, t, eps)) {
      std::fill(next.begin(), next.end(), 0);
      while (dfs(s, t, std::numeric_limits<double>::infinity(), eps) > 0) {}
    }
  }
};

}  // namespace

std::vector<char> BinaryCut::minimize(double* cost) const {
  const int n = num_vars(), s = n, t = n + 1;
  // Finite stand-in for infinity: more than every finite term together.
  auto is_inf = [](double c) { return c >= 0.5 * infinity(); };
  double finite = 0.0;
  for (auto [e0, e1] : unary_)
    for (double e : {e0, e1})
      if (!is_inf(e)) finite += std::abs(e);
  for (const Pair& p : pairs_)
    if (!is_inf(p.c)) finite += p.c;
  const double inf = 2.0 * finite + 1.0;
  const double eps = 1e-12 * (finite + 1.0);
  Flow f(n + 2);
  // x = 0 is the source side, x = 1 the sink side: s->i (cut when x = 1) carries the
  // cost of 1 above 0, i->t the cost of 0 above 1; a pair edge a->b is cut when a = 0, b = 1.
  for (int i = 0; i < n; ++i) {
    const auto [e0, e1] = unary_[size_t(i)];
    if (is_inf(e1) && !is_inf(e0)) f.add(s, i, inf);
    else if (is_inf(e0) && !is_inf(e1)) f.add(i, t, inf);
    else if (e1 > e0) f.add(s, i, e1 - e0);
    else if (e0 > e1) f.add(i, t, e0 - e1);
  }
  for (const Pair& p : pairs_) f.add(p.a, p.b, is_inf(p.c) ? inf : p.c);
  f.run(s, t, eps);
  // Source side = reachable from s in the residual graph.
  std::vector<char> label(size_t(n), 1);
  std::vector<int> stack = {s};
  std::vector<char> seen(size_t(n + 2), 0);
  seen[size_t(s)] = 1;
  while (!stack.empty()) {
    int u = stack.back();
    stack.pop_back();
    if (u < n) label[size_t(u)] = 0;
    for (int e : f.adj[size_t(u)])
      if (f.edges[size_t(e)].cap > eps && !seen[size_t(f.edges[size_t(e)].to)]) {
        seen[size_t(f.edges[size_t(e)].to)] = 1;
        stack.push_back(f.edges[size_t(e)].to);
      }
  }
  if (cost) {
    double total = constant_;
    for (int i = 0; i < n; ++i)
      total += label[size_t(i)] ? unary_[size_t(i)].second : unary_[size_t(i)].first;
    for (const Pair& p : pairs_)
      if (!label[size_t(p.a)] && label[size_t(p.b)]) total += p.c;
    *cost = total;
  }
  return label;
}

}  // namespace campo
