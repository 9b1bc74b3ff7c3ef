// RUN: cpc-opt %s --cpc-recompute-segments | FileCheck %s
// RUN: cpc-opt %s --cpc-pipeline-stages='chunks=2 split=block1.act' --cpc-recompute-segments | FileCheck %s --check-prefix=CHUNKS

// Tests that three residual MLP blocks become three segments, cut between the blocks: each
// block saves 384 B for its backward (tanh's 256 B output and the 128 B sum that the next
// block's first matmul reads; the last block's sum is not saved), and only the 128 B residual
// crosses a block boundary. Two cuts cost 2 x 128 B of checkpoints plus 384 B for the largest
// segment, less than any other cut (one segment: 896 B).
// CHECK: module attributes {cpc.recompute_segments = [{checkpoint_bytes = 0 : i64, ops = 4 : i64, saved_bytes = 384 : i64, segment = 0 : i64}, {checkpoint_bytes = 128 : i64, ops = 4 : i64, saved_bytes = 384 : i64, segment = 1 : i64}, {checkpoint_bytes = 128 : i64, ops = 5 : i64, saved_bytes = 256 : i64, segment = 2 : i64}]}
// CHECK: cpc.parameter @w0_in
// CHECK-NOT: recompute_segment
// CHECK: cpc.matmul %{{.*}}, %{{.*}} {cpc.recompute_segment = 0 : i64}
// CHECK: cpc.add %{{.*}}, %{{.*}} {cpc.recompute_segment = 0 : i64}
// CHECK: cpc.matmul %{{.*}}, %{{.*}} {cpc.recompute_segment = 1 : i64}
// CHECK: cpc.add %{{.*}}, %{{.*}} {cpc.recompute_segment = 1 : i64}
// CHECK: cpc.matmul %{{.*}}, %{{.*}} {cpc.recompute_segment = 2 : i64}
// CHECK: cpc.reduce_mean %{{.*}} {axes = array<i64: 0, 1>, cpc.recompute_segment = 2 : i64}

// Tests that no segment spans two pipeline chunks: with a chunk cut inside block 1 (before its
// tanh), a segment ends there too.
// CHUNKS: cpc.add %{{.*}}, %{{.*}} {cpc.recompute_segment = 0 : i64, cpc.stage = 0 : i64}
// CHUNKS-NEXT: cpc.parameter @w1_in
// CHUNKS-NEXT: cpc.matmul %{{.*}}, %{{.*}} {cpc.recompute_segment = 0 : i64, cpc.stage = 0 : i64}
// CHUNKS-NEXT: cpc.tanh %{{.*}} {cpc.recompute_segment = 1 : i64, cpc.stage = 1 : i64}
cpc.variable @w0_in trainable : tensor<8x16xf32>
cpc.variable @w0_out trainable : tensor<16x8xf32>
cpc.variable @w1_in trainable : tensor<8x16xf32>
cpc.variable @w1_out trainable : tensor<16x8xf32>
cpc.variable @w2_in trainable : tensor<8x16xf32>
cpc.variable @w2_out trainable : tensor<16x8xf32>
func.func @main(%x: tensor<4x8xf32> {cpc.name = "x"}) -> tensor<f32> {
  %win0 = cpc.parameter @w0_in : tensor<8x16xf32>
  %h0 = cpc.matmul %x, %win0 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc("block0.fc1")
  %a0 = cpc.tanh %h0 : tensor<4x16xf32> loc("block0.act")
  %wout0 = cpc.parameter @w0_out : tensor<16x8xf32>
  %o0 = cpc.matmul %a0, %wout0 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32> loc("block0.fc2")
  %x1 = cpc.add %x, %o0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("block0.residual")
  %win1 = cpc.parameter @w1_in : tensor<8x16xf32>
  %h1 = cpc.matmul %x1, %win1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc("block1.fc1")
  %a1 = cpc.tanh %h1 : tensor<4x16xf32> loc("block1.act")
  %wout1 = cpc.parameter @w1_out : tensor<16x8xf32>
  %o1 = cpc.matmul %a1, %wout1 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32> loc("block1.fc2")
  %x2 = cpc.add %x1, %o1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("block1.residual")
  %win2 = cpc.parameter @w2_in : tensor<8x16xf32>
  %h2 = cpc.matmul %x2, %win2 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc("block2.fc1")
  %a2 = cpc.tanh %h2 : tensor<4x16xf32> loc("block2.act")
  %wout2 = cpc.parameter @w2_out : tensor<16x8xf32>
  %o2 = cpc.matmul %a2, %wout2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32> loc("block2.fc2")
  %x3 = cpc.add %x2, %o2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("block2.residual")
  %l = cpc.reduce_mean %x3 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32> loc("loss")
  return %l : tensor<f32>
}
