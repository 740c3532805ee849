// BERT (Devlin et al. 2019) for masked-language-model pre-training, with Hugging Face's
// BertForMaskedLM parameter names and counts: bert.embeddings.*, bert.encoder.layer.N.*,
// cls.predictions.* (no pooler; the decoder's weight is the word-embedding table, tied as
// in Hugging Face, so a checkpoint holds it once under bert.embeddings.word_embeddings).
//
// Shapes: input ids [B, T] (i32) -> logits [B * T, V]. Every position is predicted (as
// Hugging Face does); the loss keeps the masked ones. Sequences are full windows of text,
// so there is no padding and no attention mask.
#include <cmath>

#include "models/layers.h"
#include "models/models.h"

namespace campo {

namespace {

// Hugging Face's _init_weights: N(0, 0.02) for every Linear and Embedding, zero biases,
// LayerNorm ones / zeros.
Init bert_normal() { return Init::normal(0.0f, 0.02f); }

ValueId dense(Builder& b, ValueId x, int64_t out, const std::string& name) {
  return layers::linear(b, x, out, name, true, bert_normal(), Init::zeros());
}

// The first `rows` rows of table [R, H] (all of it when rows == R): a SplitV whose second
// piece is unused, so its gradient is zeros there.
ValueId first_rows(Builder& b, ValueId table, int64_t rows, const std::string& name) {
  const int64_t total = b.shape(table)[0];
  if (rows == total) return table;
  return b.op_multi(OpKind::SplitV, {table}, SplitAttrs{0, {rows, total - rows}}, name)[0];
}

// [B * T, H] -> [B, heads, T, d]
ValueId split_heads(Builder& b, ValueId x, int64_t batch, int64_t seq, int heads) {
  const int64_t d = b.shape(x)[1] / heads;
  return b.transpose(b.reshape(x, {batch, seq, heads, d}), {0, 2, 1, 3});
}

ValueId encoder_layer(Builder& b, ValueId x, int64_t batch, int64_t seq, const BertConfig& c,
                      float dropout) {
  const int64_t hidden = c.hidden;
  ValueId attention;
  {
    auto s = b.scope("attention");
    ValueId context;
    {
      auto self = b.scope("self");
      ValueId q = split_heads(b, dense(b, x, hidden, "query"), batch, seq, c.heads);
      ValueId k = split_heads(b, dense(b, x, hidden, "key"), batch, seq, c.heads);
      ValueId v = split_heads(b, dense(b, x, hidden, "value"), batch, seq, c.heads);
      // scores [B, heads, T, T] = q k^T / sqrt(d)
      ValueId scores = b.mul(b.batch_matmul(q, k, false, true),
                             b.constant(1.0f / std::sqrt(float(hidden / c.heads))));
      ValueId probs = b.dropout(b.softmax(scores), dropout);
      context =
          b.reshape(b.transpose(b.batch_matmul(probs, v), {0, 2, 1, 3}), {batch * seq, hidden});
    }
    auto out = b.scope("output");
    ValueId y = b.dropout(dense(b, context, hidden, "dense"), dropout);
    attention = layers::layer_norm(b, b.add(y, x), "LayerNorm", c.layer_norm_eps);
  }
  ValueId inter;
  {
    auto s = b.scope("intermediate");
    inter = b.gelu(dense(b, attention, c.intermediate, "dense"));
  }
  auto s = b.scope("output");
  ValueId y = b.dropout(dense(b, inter, hidden, "dense"), dropout);
  return layers::layer_norm(b, b.add(y, attention), "LayerNorm", c.layer_norm_eps);
}

}  // namespace

BertConfig bert_config(const std::string& name) {
  // Google's BERT miniatures (Turc et al. 2019) and BERT-base; intermediate = 4 x hidden.
  struct Size {
    const char* name;
    int layers, hidden, heads;
  };
  static const Size kSizes[] = {
      {"tiny", 2, 128, 2},   {"mini", 4, 256, 4},   {"small", 4, 512, 8},
      {"medium", 8, 512, 8}, {"base", 12, 768, 12},
  };
  for (const Size& s : kSizes)
    if (name == s.name) {
      BertConfig c;
      c.layers = s.layers;
      c.hidden = s.hidden;
      c.heads = s.heads;
      c.intermediate = 4 * s.hidden;
      return c;
    }
  CAMPO_FAIL("unknown --bert-config '", name, "' (expected tiny, mini, small, medium or base)");
}

ValueId build_bert(Builder& b, ValueId input_ids, const ModelOptions& o) {
  const BertConfig c = bert_config(o.bert_config);
  const Shape& in = b.shape(input_ids);
  CAMPO_CHECK(in.size() == 2 && b.dtype(input_ids) == DType::i32,
              "bert expects token ids [batch, sequence] (i32), got ", shape_str(in), " ",
              dtype_name(b.dtype(input_ids)),
              " (train it on a text data set: --dataset text:PATH)");
  const int64_t batch = in[0], seq = in[1];
  CAMPO_CHECK(seq >= 1 && seq <= c.max_positions, "bert: sequence length ", seq, " is outside 1..",
              c.max_positions, " (its position table has ", c.max_positions, " rows)");
  const int64_t vocab = o.num_classes, hidden = c.hidden;
  CAMPO_CHECK(vocab > 5, "bert: vocabulary of ", vocab, " tokens is too small");
  ValueId word_table;
  ValueId x;
  {
    auto s = b.scope("bert");
    {
      auto e = b.scope("embeddings");
      word_table = b.variable("word_embeddings.weight", {vocab, hidden}, bert_normal());
      ValueId positions =
          b.variable("position_embeddings.weight", {c.max_positions, hidden}, bert_normal());
      ValueId types =
          b.variable("token_type_embeddings.weight", {c.type_vocab, hidden}, bert_normal());
      // words [B, T * H] + positions [T * H] (broadcast over B), then + type 0's row [H]
      // (every token is of segment 0) over [B * T, H].
      ValueId words = b.reshape(b.gather(word_table, input_ids), {batch, seq * hidden});
      x = b.bias_add(words, b.reshape(first_rows(b, positions, seq, "positions"), {seq * hidden}));
      x = b.bias_add(b.reshape(x, {batch * seq, hidden}),
                     b.reshape(first_rows(b, types, 1, "token_type"), {hidden}));
      x = b.dropout(layers::layer_norm(b, x, "LayerNorm", c.layer_norm_eps), o.dropout);
    }
    auto e = b.scope("encoder");
    auto l = b.scope("layer");
    for (int i = 0; i < c.layers; ++i) {
      auto s = b.scope(std::to_string(i));
      x = encoder_layer(b, x, batch, seq, c, o.dropout);
    }
  }
  auto s = b.scope("cls");
  auto p = b.scope("predictions");
  {
    auto t = b.scope("transform");
    x = layers::layer_norm(b, b.gelu(dense(b, x, hidden, "dense")), "LayerNorm", c.layer_norm_eps);
  }
  // decoder: x word_table^T + bias (the table tied, as Hugging Face's tie_weights).
  return b.bias_add(b.matmul(x, word_table, false, true),
                    b.variable("bias", {vocab}, Init::zeros()));
}

}  // namespace campo
