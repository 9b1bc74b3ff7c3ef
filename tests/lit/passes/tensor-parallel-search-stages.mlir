// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=2 search=true" | FileCheck %s

// Tests that the search ties repeated blocks whatever pipeline chunk they are in: the same eight
// residual MLP blocks, first unlabelled, then with cpc.stage labels as cpc-pipeline-stages puts
// them (blocks 0-2 in chunk 0, 3-5 in chunk 1, 6-7 in chunk 2), give one program of the same
// size with the same nodes tied (a label in the nodes' hash left blocks of different chunks
// apart: a GPT of 24 layers at --pp 32 had 18x the program variables and took 4 s to solve).
// CHECK-LABEL: func.func @blocks
// CHECK-SAME: nodes = 48 : i64, optimal = true, program_variables = 372 : i64
// CHECK-SAME: tied = 21 : i64
// CHECK-LABEL: func.func @blocks
// CHECK-SAME: nodes = 48 : i64, optimal = true, program_variables = 372 : i64
// CHECK-SAME: tied = 21 : i64
cpc.variable @w1_0 trainable : tensor<16x8xf32>
cpc.variable @w2_0 trainable : tensor<8x16xf32>
cpc.variable @w1_1 trainable : tensor<16x8xf32>
cpc.variable @w2_1 trainable : tensor<8x16xf32>
cpc.variable @w1_2 trainable : tensor<16x8xf32>
cpc.variable @w2_2 trainable : tensor<8x16xf32>
cpc.variable @w1_3 trainable : tensor<16x8xf32>
cpc.variable @w2_3 trainable : tensor<8x16xf32>
cpc.variable @w1_4 trainable : tensor<16x8xf32>
cpc.variable @w2_4 trainable : tensor<8x16xf32>
cpc.variable @w1_5 trainable : tensor<16x8xf32>
cpc.variable @w2_5 trainable : tensor<8x16xf32>
cpc.variable @w1_6 trainable : tensor<16x8xf32>
cpc.variable @w2_6 trainable : tensor<8x16xf32>
cpc.variable @w1_7 trainable : tensor<16x8xf32>
cpc.variable @w2_7 trainable : tensor<8x16xf32>
func.func @blocks(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1_0 = cpc.parameter @w1_0 : tensor<16x8xf32>
  %w2_0 = cpc.parameter @w2_0 : tensor<8x16xf32>
  %h0 = cpc.matmul %x, %w1_0 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a0 = cpc.gelu %h0 : tensor<4x16xf32>
  %y0 = cpc.matmul %a0, %w2_0 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r0 = cpc.add %x, %y0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_1 = cpc.parameter @w1_1 : tensor<16x8xf32>
  %w2_1 = cpc.parameter @w2_1 : tensor<8x16xf32>
  %h1 = cpc.matmul %r0, %w1_1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a1 = cpc.gelu %h1 : tensor<4x16xf32>
  %y1 = cpc.matmul %a1, %w2_1 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r1 = cpc.add %r0, %y1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_2 = cpc.parameter @w1_2 : tensor<16x8xf32>
  %w2_2 = cpc.parameter @w2_2 : tensor<8x16xf32>
  %h2 = cpc.matmul %r1, %w1_2 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a2 = cpc.gelu %h2 : tensor<4x16xf32>
  %y2 = cpc.matmul %a2, %w2_2 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r2 = cpc.add %r1, %y2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_3 = cpc.parameter @w1_3 : tensor<16x8xf32>
  %w2_3 = cpc.parameter @w2_3 : tensor<8x16xf32>
  %h3 = cpc.matmul %r2, %w1_3 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a3 = cpc.gelu %h3 : tensor<4x16xf32>
  %y3 = cpc.matmul %a3, %w2_3 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r3 = cpc.add %r2, %y3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_4 = cpc.parameter @w1_4 : tensor<16x8xf32>
  %w2_4 = cpc.parameter @w2_4 : tensor<8x16xf32>
  %h4 = cpc.matmul %r3, %w1_4 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a4 = cpc.gelu %h4 : tensor<4x16xf32>
  %y4 = cpc.matmul %a4, %w2_4 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r4 = cpc.add %r3, %y4 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_5 = cpc.parameter @w1_5 : tensor<16x8xf32>
  %w2_5 = cpc.parameter @w2_5 : tensor<8x16xf32>
  %h5 = cpc.matmul %r4, %w1_5 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a5 = cpc.gelu %h5 : tensor<4x16xf32>
  %y5 = cpc.matmul %a5, %w2_5 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r5 = cpc.add %r4, %y5 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_6 = cpc.parameter @w1_6 : tensor<16x8xf32>
  %w2_6 = cpc.parameter @w2_6 : tensor<8x16xf32>
  %h6 = cpc.matmul %r5, %w1_6 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a6 = cpc.gelu %h6 : tensor<4x16xf32>
  %y6 = cpc.matmul %a6, %w2_6 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r6 = cpc.add %r5, %y6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_7 = cpc.parameter @w1_7 : tensor<16x8xf32>
  %w2_7 = cpc.parameter @w2_7 : tensor<8x16xf32>
  %h7 = cpc.matmul %r6, %w1_7 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a7 = cpc.gelu %h7 : tensor<4x16xf32>
  %y7 = cpc.matmul %a7, %w2_7 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r7 = cpc.add %r6, %y7 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r7 : tensor<4x8xf32>
}

// -----

cpc.variable @w1_0 trainable : tensor<16x8xf32>
cpc.variable @w2_0 trainable : tensor<8x16xf32>
cpc.variable @w1_1 trainable : tensor<16x8xf32>
cpc.variable @w2_1 trainable : tensor<8x16xf32>
cpc.variable @w1_2 trainable : tensor<16x8xf32>
cpc.variable @w2_2 trainable : tensor<8x16xf32>
cpc.variable @w1_3 trainable : tensor<16x8xf32>
cpc.variable @w2_3 trainable : tensor<8x16xf32>
cpc.variable @w1_4 trainable : tensor<16x8xf32>
cpc.variable @w2_4 trainable : tensor<8x16xf32>
cpc.variable @w1_5 trainable : tensor<16x8xf32>
cpc.variable @w2_5 trainable : tensor<8x16xf32>
cpc.variable @w1_6 trainable : tensor<16x8xf32>
cpc.variable @w2_6 trainable : tensor<8x16xf32>
cpc.variable @w1_7 trainable : tensor<16x8xf32>
cpc.variable @w2_7 trainable : tensor<8x16xf32>
func.func @blocks(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1_0 = cpc.parameter @w1_0 : tensor<16x8xf32>
  %w2_0 = cpc.parameter @w2_0 : tensor<8x16xf32>
  %h0 = cpc.matmul %x, %w1_0 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a0 = cpc.gelu %h0 {cpc.stage = 0 : i64} : tensor<4x16xf32>
  %y0 = cpc.matmul %a0, %w2_0 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r0 = cpc.add %x, %y0 {cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_1 = cpc.parameter @w1_1 : tensor<16x8xf32>
  %w2_1 = cpc.parameter @w2_1 : tensor<8x16xf32>
  %h1 = cpc.matmul %r0, %w1_1 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a1 = cpc.gelu %h1 {cpc.stage = 0 : i64} : tensor<4x16xf32>
  %y1 = cpc.matmul %a1, %w2_1 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r1 = cpc.add %r0, %y1 {cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_2 = cpc.parameter @w1_2 : tensor<16x8xf32>
  %w2_2 = cpc.parameter @w2_2 : tensor<8x16xf32>
  %h2 = cpc.matmul %r1, %w1_2 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a2 = cpc.gelu %h2 {cpc.stage = 0 : i64} : tensor<4x16xf32>
  %y2 = cpc.matmul %a2, %w2_2 {transpose_rhs = true, cpc.stage = 0 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r2 = cpc.add %r1, %y2 {cpc.stage = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_3 = cpc.parameter @w1_3 : tensor<16x8xf32>
  %w2_3 = cpc.parameter @w2_3 : tensor<8x16xf32>
  %h3 = cpc.matmul %r2, %w1_3 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a3 = cpc.gelu %h3 {cpc.stage = 1 : i64} : tensor<4x16xf32>
  %y3 = cpc.matmul %a3, %w2_3 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r3 = cpc.add %r2, %y3 {cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_4 = cpc.parameter @w1_4 : tensor<16x8xf32>
  %w2_4 = cpc.parameter @w2_4 : tensor<8x16xf32>
  %h4 = cpc.matmul %r3, %w1_4 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a4 = cpc.gelu %h4 {cpc.stage = 1 : i64} : tensor<4x16xf32>
  %y4 = cpc.matmul %a4, %w2_4 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r4 = cpc.add %r3, %y4 {cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_5 = cpc.parameter @w1_5 : tensor<16x8xf32>
  %w2_5 = cpc.parameter @w2_5 : tensor<8x16xf32>
  %h5 = cpc.matmul %r4, %w1_5 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a5 = cpc.gelu %h5 {cpc.stage = 1 : i64} : tensor<4x16xf32>
  %y5 = cpc.matmul %a5, %w2_5 {transpose_rhs = true, cpc.stage = 1 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r5 = cpc.add %r4, %y5 {cpc.stage = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_6 = cpc.parameter @w1_6 : tensor<16x8xf32>
  %w2_6 = cpc.parameter @w2_6 : tensor<8x16xf32>
  %h6 = cpc.matmul %r5, %w1_6 {transpose_rhs = true, cpc.stage = 2 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a6 = cpc.gelu %h6 {cpc.stage = 2 : i64} : tensor<4x16xf32>
  %y6 = cpc.matmul %a6, %w2_6 {transpose_rhs = true, cpc.stage = 2 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r6 = cpc.add %r5, %y6 {cpc.stage = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w1_7 = cpc.parameter @w1_7 : tensor<16x8xf32>
  %w2_7 = cpc.parameter @w2_7 : tensor<8x16xf32>
  %h7 = cpc.matmul %r6, %w1_7 {transpose_rhs = true, cpc.stage = 2 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a7 = cpc.gelu %h7 {cpc.stage = 2 : i64} : tensor<4x16xf32>
  %y7 = cpc.matmul %a7, %w2_7 {transpose_rhs = true, cpc.stage = 2 : i64} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r7 = cpc.add %r6, %y7 {cpc.stage = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r7 : tensor<4x8xf32>
}
