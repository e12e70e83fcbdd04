#pragma once
// InferenceModel: a trained model's configuration, vocabulary and weights, arranged by role for
// decoding. Built from a checkpoint written by `seqtape train`, or from named tensors — a live
// training model's parameters share their storage with it, nothing is copied.
//
// The weights are the training model's, with its names and its [in, out] layout (y = x·W + b);
// see model/param_names.h for the parameter list. infer/ recomputes the same math with the same
// kernels, without the tape. WeightLayout::Decode (what load() uses) keeps the decoder's
// matrices transposed instead — see WeightLayout.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infer/quant.h"
#include "io/checkpoint.h"  // NamedTensor
#include "model/blocks.h"
#include "model/config.h"
#include "tensor/tensor.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"  // Vocab

namespace seqtape {

// How the model's weight matrices are stored.
//   Training: [in, out], as trained (y = x·W + b). float32 tensors are shared with the source
//     (a live model's parameters are viewed, never copied).
//   Decode: every encoder- and decoder-layer matrix and the output projection (out_proj.weight,
//     or the embedding when the output is tied) packed into an owned copy at construction, as
//     inference engines pack weights at load time: kernels::pack_strips' strips of 32 outputs,
//     [ceil(out / 32), in, 32]. kernels::gemm_packed reads them with every row of a batch summed
//     alone (a row gives the same bits in any batch). bench_decode measures both layouts side by
//     side. Same math: logits agree with the Training layout within float32 rounding. The
//     embedding itself keeps its [V, C] layout.
enum class WeightLayout { Training, Decode };

// How one matrix is stored, as infer/layers.h's linear() reads it: [in, out]; [out, in] (the
// embedding [V, C] as a tied output projection); packed in strips (WeightLayout::Decode); or
// quantized (--compute-type int8 or bf16): the tensor is then undefined and the matrix is the
// params' QuantWeight beside it (infer/quant.h).
enum class MatrixLayout { InOut, OutIn, Packed, Quantized };

// One multi-head attention block. w* [C, C] in the [in, out] layout (packed in a
// WeightLayout::Decode model); b* [C], undefined without attn_bias.
struct AttnParams {
  Tensor wq, bq, wk, bk, wv, bv, wo, bo;
  QuantWeight qwq, qwk, qwv, qwo;  // MatrixLayout::Quantized: wq, wk, wv, wo as [out, in]
};

// gamma, beta [C] (beta only for a kind that has one); both undefined with norm placement none.
struct NormParams {
  Tensor gamma, beta;
  NormKind kind = NormKind::LayerNorm;
  bool defined() const { return gamma.defined(); }
};

// w1 [C, F], b1 [F], w2 [F, C], b2 [C] (both packed in a WeightLayout::Decode model); biases
// undefined without ffn_bias.
struct FfnParams {
  Tensor w1, b1, w2, b2;
  Tensor w3, b3;  // a gated activation's gate: w3 [C, F] (packed as w1), b3 [F]; else undefined
  QuantWeight qw1, qw2, qw3;  // MatrixLayout::Quantized: w1, w2, w3 as [out, in]
};

// One residual sublayer of a layer, as model/blocks.h lists it: attention (self or cross) or
// feed-forward weights, and its norm's.
struct SublayerParams {
  SublayerKind kind = SublayerKind::SelfAttention;
  AttnParams attn;  // attention sublayers
  FfnParams ffn;    // the feed-forward sublayer
  NormParams norm;
};

// A layer's sublayers in execution order.
struct LayerParams {
  std::vector<SublayerParams> sublayers;
  // The sublayer of that kind; Error when the layer has none.
  const SublayerParams& sublayer(SublayerKind kind) const;
};

class InferenceModel {
 public:
  // Reads a checkpoint; any damage, a bad configuration or a weight that does not fit it is an
  // Error naming the file.
  static InferenceModel load(const std::string& path, WeightLayout layout = WeightLayout::Decode,
                             ComputeType compute = ComputeType::F32);

  // Takes the weights by name (float64 tensors are converted; float32 ones are shared, not
  // copied, in the Training layout). Every parameter the configuration implies must be present
  // with its shape, no other name may appear, and every value must be finite; otherwise an
  // Error names `where` and the parameter. The vocabulary must have cfg.vocab_size tokens.
  // codec: how text becomes ids (a SentencePiece model, say) over the same vocabulary; null for
  // the character tokenizer over `vocab`. compute int8 or bf16 (resolved: never auto) stores the
  // embedding and every matrix quantized (infer/quant.h) in place of the float32 ones.
  // quantized: matrices already quantized as `compute` (a quantized export, infer/quant_io.h),
  // by parameter name; they stand for those parameters, which `params` then lacks.
  InferenceModel(const ModelConfig& cfg, Vocab vocab, const std::vector<NamedTensor>& params,
                 const std::string& where = "parameters",
                 WeightLayout layout = WeightLayout::Training,
                 std::shared_ptr<const TextCodec> codec = nullptr,
                 ComputeType compute = ComputeType::F32,
                 const std::map<std::string, QuantWeight>& quantized = {});

  const ModelConfig& config() const { return cfg_; }
  const Vocab& vocab() const { return vocab_; }
  // Text <-> ids: the checkpoint's tokenizer (a SentencePiece model when it carries one), else
  // the character tokenizer over vocab().
  const TextCodec& codec() const { return *codec_; }
  bool seq2seq() const { return cfg_.arch == Arch::Seq2Seq; }

  const Tensor& embed() const { return embed_; }               // [V, C]; undefined when quantized
  const QuantWeight& quant_embed() const { return q_embed_; }  // [V, C] when quantized
  const QuantWeight& quant_out_weight() const { return q_out_; }  // [V, C] when quantized
  ComputeType compute_type() const { return compute_; }           // f32, int8 or bf16
  size_t weight_bytes() const;  // the matrices and embedding as held (biases, norms excluded)
  const Tensor& positions() const { return positions_; }  // [P, C]; undefined for PE none
  // Output projection: [C, V]; the embedding [V, C] itself when tied (MatrixLayout::OutIn); or
  // either packed in the Decode layout.
  const Tensor& out_weight() const { return out_w_.defined() ? out_w_ : embed_; }
  MatrixLayout out_weight_layout() const {
    return compute_ != ComputeType::F32      ? MatrixLayout::Quantized
           : layout_ == WeightLayout::Decode ? MatrixLayout::Packed
           : tied_                           ? MatrixLayout::OutIn
                                             : MatrixLayout::InOut;
  }
  // Every layer's matrices: [in, out], or packed in the Decode layout.
  MatrixLayout matrix_layout() const {
    if (compute_ != ComputeType::F32) return MatrixLayout::Quantized;
    return layout_ == WeightLayout::Decode ? MatrixLayout::Packed : MatrixLayout::InOut;
  }
  WeightLayout layout() const { return layout_; }    // of the decoder's matrices
  const Tensor& out_bias() const { return out_b_; }  // [V]

  // The stacks' layers (encoder: Seq2Seq only) and final norms (pre-norm only), loaded by
  // iterating model_blocks().
  const std::vector<LayerParams>& encoder_layers() const { return encoder_; }
  const NormParams& encoder_final_norm() const { return encoder_final_; }
  const std::vector<LayerParams>& decoder_layers() const { return decoder_; }
  const NormParams& decoder_final_norm() const { return decoder_final_; }

  size_t parameter_count() const { return parameter_count_; }  // scalars

 private:
  void quantize_weights();

  ModelConfig cfg_;
  Vocab vocab_;
  std::shared_ptr<const TextCodec> codec_;
  Tensor embed_, positions_, out_w_, out_b_;
  bool tied_ = false;
  WeightLayout layout_ = WeightLayout::Training;
  ComputeType compute_ = ComputeType::F32;
  QuantWeight q_embed_, q_out_;
  std::vector<LayerParams> encoder_, decoder_;
  NormParams encoder_final_, decoder_final_;
  size_t parameter_count_ = 0;
};

}  // namespace seqtape
